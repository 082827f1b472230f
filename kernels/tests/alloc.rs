//! GMP and MPFR on mimalloc, in a process of their own as in `tmd-worker`: numbers made on
//! some threads and freed on others, grown, printed and read back, with the same values as
//! under malloc.

use rug::float::Round;
use rug::{Float, Integer};
use std::sync::mpsc;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The only test of this binary: the hook must come before any GMP number.
#[test]
fn numbers_made_and_freed_across_threads_keep_their_values() {
    assert!(!tmd_kernels::alloc::gmp_is_on_mimalloc());
    tmd_kernels::alloc::gmp_on_mimalloc();
    assert!(tmd_kernels::alloc::gmp_is_on_mimalloc());
    let (tx, rx) = mpsc::channel::<(u32, Integer, Float)>();
    let makers: Vec<_> = (0..4u32)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..500u32 {
                    // Grown past its first allocation, then sent away to be freed elsewhere.
                    let n = Integer::from(Integer::u_pow_u(3 + t, 200 + i));
                    let mut x = Float::with_val(565, 1u32 + i);
                    let mut c = Float::new(565);
                    x.sin_cos_round(&mut c, Round::Nearest);
                    tx.send((i, n, x)).expect("the receiver lives");
                }
            })
        })
        .collect();
    drop(tx);
    let mut seen = 0;
    for (i, n, x) in rx {
        let text = n.to_string_radix(16);
        assert_eq!(Integer::from_str_radix(&text, 16).unwrap(), n);
        assert!(n.significant_bits() > 200 + i);
        let want = Float::with_val(565, Float::with_val(565, 1u32 + i).sin_ref());
        assert_eq!(x, want, "sin({})", 1 + i);
        seen += 1;
    }
    for m in makers {
        m.join().expect("a maker");
    }
    assert_eq!(seen, 2000);
}
