//! GMP's and MPFR's allocations through mimalloc, for a process whose Rust allocator is
//! mimalloc too (`tmd-worker`'s).
//!
//! Far out, sin, cos and tan are searched along progressions: every core makes millions of
//! pieces a unit, each from a few hundred MPFR numbers made and freed, and the pieces are
//! freed by another thread than the one that made them. On an H100's host, 16 threads made
//! 1.13 times the pieces a second with mimalloc as with glibc's malloc (`tmd-worker bench
//! --generation-only`).

use gmp_mpfr_sys::gmp;
use std::ffi::c_void;
use std::sync::Once;

extern "C" fn allocate(size: usize) -> *mut c_void {
    // SAFETY: mimalloc's malloc, any size.
    let p = unsafe { libmimalloc_sys::mi_malloc(size) };
    if p.is_null() {
        // GMP takes every allocation as granted, as with its default functions.
        out_of_memory(size)
    }
    p
}

extern "C" fn reallocate(ptr: *mut c_void, _old: usize, new: usize) -> *mut c_void {
    // SAFETY: `ptr` came from `allocate` or `reallocate` (GMP frees and grows only its own).
    let p = unsafe { libmimalloc_sys::mi_realloc(ptr, new) };
    if p.is_null() {
        out_of_memory(new)
    }
    p
}

extern "C" fn free(ptr: *mut c_void, _size: usize) {
    // SAFETY: as in `reallocate`.
    unsafe { libmimalloc_sys::mi_free(ptr) }
}

fn out_of_memory(size: usize) -> ! {
    eprintln!("tmd: out of memory allocating {size} bytes for GMP/MPFR");
    std::process::abort()
}

/// Points GMP's (and so MPFR's and rug's) allocations at mimalloc, once. To be called first
/// thing in `main`, before any GMP number exists: a number allocated by malloc and freed
/// through mimalloc would corrupt the heap.
pub fn gmp_on_mimalloc() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the functions match GMP's signatures and never return null; called before
        // any GMP allocation (the contract above), so every block GMP frees is mimalloc's.
        unsafe { gmp::set_memory_functions(Some(allocate), Some(reallocate), Some(free)) }
    });
}

/// Whether GMP allocates through mimalloc ([`gmp_on_mimalloc`] ran in this process).
pub fn gmp_is_on_mimalloc() -> bool {
    let (mut a, mut r, mut f) = (None, None, None);
    // SAFETY: GMP writes its three current functions into the three places given.
    unsafe { gmp::get_memory_functions(&mut a, &mut r, &mut f) };
    let ours: extern "C" fn(usize) -> *mut c_void = allocate;
    a.map(|a| a as usize) == Some(ours as usize)
}
