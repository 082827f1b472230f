//! Fixed-size multiprecision words: fractions mod 1 as `L` little-endian 64-bit limbs.
//!
//! The walk only needs `{value}` (the fractional part), since every argument offset and binomial
//! coefficient that multiplies a value is an integer; so all words are taken mod `2^(64 L)` and
//! addition is plain wrapping addition with carries. The top limb is the top 64 bits of the
//! fraction, which is what the existence tests read.

use rug::Integer;

/// The largest number of limbs of a word (512 bits, the widest generation gives).
pub const MAX_LIMBS: usize = 8;

/// `L` limbs, least significant first; the value is `limbs / 2^(64 L)` mod 1.
pub type Word<const L: usize> = [u64; L];

/// `a += b` mod `2^(64 L)`.
#[inline(always)]
pub fn add<const L: usize>(a: &mut Word<L>, b: &Word<L>) {
    let mut carry = false;
    for k in 0..L {
        let (s1, c1) = a[k].overflowing_add(b[k]);
        let (s2, c2) = s1.overflowing_add(carry as u64);
        a[k] = s2;
        carry = c1 | c2;
    }
}

/// `a - b` mod `2^(64 L)`.
#[inline(always)]
pub fn sub<const L: usize>(a: &Word<L>, b: &Word<L>) -> Word<L> {
    let mut out = [0u64; L];
    let mut borrow = false;
    for k in 0..L {
        let (s1, b1) = a[k].overflowing_sub(b[k]);
        let (s2, b2) = s1.overflowing_sub(borrow as u64);
        out[k] = s2;
        borrow = b1 | b2;
    }
    out
}

/// `a * m` mod `2^(64 L)` for a small integer `m`.
#[inline(always)]
pub fn mul_small<const L: usize>(a: &Word<L>, m: u64) -> Word<L> {
    let mut out = [0u64; L];
    let mut carry = 0u128;
    for k in 0..L {
        let t = a[k] as u128 * m as u128 + carry;
        out[k] = t as u64;
        carry = t >> 64;
    }
    out
}

/// `a * m` mod `2^(64 L)` for a 128-bit `m`: `a m_lo + 2^64 a m_hi`.
#[inline]
pub fn mul_u128<const L: usize>(a: &Word<L>, m: u128) -> Word<L> {
    let mut out = mul_small(a, m as u64);
    let hi = mul_small(a, (m >> 64) as u64);
    let mut shifted = [0u64; L];
    shifted[1..].copy_from_slice(&hi[..L - 1]);
    add(&mut out, &shifted);
    out
}

/// The value `j` steps after the start of a walked table: `sum_m C(j, m) Delta^m w`, exact mod
/// `2^(64 L)` (the walk's `Delta^l w += Delta^(l+1) w`, `j` times, has this closed form).
/// `None` where a binomial would not fit in 128 bits (then the caller evaluates it otherwise).
pub fn value_at_offset<const L: usize>(w: &[Word<L>], j: u64) -> Option<Word<L>> {
    let mut acc = [0u64; L];
    let mut c: u128 = 1;
    for (m, wm) in w.iter().enumerate() {
        if m > 0 {
            if (j as u128) < m as u128 {
                break;
            }
            // C(j, m) = C(j, m-1) (j - m + 1) / m, exactly.
            c = c.checked_mul((j - m as u64 + 1) as u128)? / m as u128;
        }
        add(&mut acc, &mul_u128(wm, c));
    }
    Some(acc)
}

/// `-a` mod `2^(64 L)`.
#[inline(always)]
pub fn neg<const L: usize>(a: &Word<L>) -> Word<L> {
    sub(&[0u64; L], a)
}

/// `floor(a 2^64)`: the top limb.
#[inline(always)]
pub fn floor64<const L: usize>(a: &Word<L>) -> u64 {
    a[L - 1]
}

/// `ceil(a 2^64) mod 2^64`.
#[inline(always)]
pub fn ceil64<const L: usize>(a: &Word<L>) -> u64 {
    let low_nonzero = a[..L - 1].iter().any(|&l| l != 0);
    a[L - 1].wrapping_add(low_nonzero as u64)
}

/// `floor({-a} 2^64)`.
#[inline(always)]
pub fn neg_floor64<const L: usize>(a: &Word<L>) -> u64 {
    let low_nonzero = a[..L - 1].iter().any(|&l| l != 0);
    if low_nonzero {
        !a[L - 1]
    } else {
        a[L - 1].wrapping_neg()
    }
}

/// An integer (in units of `2^-(64 L)`) reduced mod 1 into a word.
pub fn from_integer<const L: usize>(v: &Integer) -> Word<L> {
    let r = Integer::from(v.keep_bits_ref(64 * L as u32));
    let mut w = [0u64; L];
    r.write_digits(&mut w, rug::integer::Order::Lsf);
    w
}

/// The word as a nonnegative integer below `2^(64 L)`.
pub fn to_integer<const L: usize>(w: &Word<L>) -> Integer {
    Integer::from_digits(&w[..], rug::integer::Order::Lsf)
}

/// A deterministic stream of 64-bit limbs for the tests of words (an LCG: Knuth's MMIX
/// constants), so a failure reproduces.
#[cfg(test)]
pub(crate) fn test_limbs() -> impl FnMut() -> u64 {
    let mut state = 0x5eed_u64;
    move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn value_at_offset_is_the_walked_value() {
        let mut next = test_limbs();
        for n in [1usize, 2, 5, 9, 13] {
            let start: Vec<Word<3>> = (0..n).map(|_| [next(), next(), next()]).collect();
            let mut w = start.clone();
            for j in 0..5000u64 {
                assert_eq!(value_at_offset(&start, j), Some(w[0]), "n={n} j={j}");
                for l in 0..n - 1 {
                    let up = w[l + 1];
                    add(&mut w[l], &up);
                }
            }
        }
        // Binomials beyond 128 bits are refused, not wrapped.
        let start = vec![[1u64, 0, 0]; 13];
        assert_eq!(value_at_offset(&start, 1 << 40), None);
    }

    fn modulus() -> Integer {
        Integer::from(1) << 192
    }

    proptest! {
        #[test]
        fn word_arithmetic_matches_integers(a: [u64; 3], b: [u64; 3], m: u64) {
            let (ia, ib) = (to_integer(&a), to_integer(&b));
            let mut s = a;
            add(&mut s, &b);
            prop_assert_eq!(to_integer(&s), Integer::from(&ia + &ib) % modulus());
            let d = sub(&a, &b);
            prop_assert_eq!(to_integer(&d), Integer::from(&ia - &ib).keep_bits(192));
            prop_assert_eq!(to_integer(&mul_small(&a, m)), Integer::from(&ia * m) % modulus());
            let m128 = (m as u128) << 64 | (b[0] as u128);
            prop_assert_eq!(
                to_integer(&mul_u128(&a, m128)),
                (&ia * Integer::from(m128)) % modulus()
            );
            prop_assert_eq!(to_integer(&neg(&a)), Integer::from(-&ia).keep_bits(192));
            prop_assert_eq!(from_integer::<3>(&Integer::from(-&ia)), neg(&a));
            // floor/ceil of the top 64 bits
            let top = Integer::from(&ia >> 128u32);
            prop_assert_eq!(Integer::from(floor64(&a)), top.clone());
            let c = (&ia + ((Integer::from(1) << 128u32) - 1u32)) >> 128u32;
            prop_assert_eq!(Integer::from(ceil64(&a)), c.keep_bits(64));
            let n = Integer::from(-&ia).keep_bits(192) >> 128u32;
            prop_assert_eq!(Integer::from(neg_floor64(&a)), n);
        }
    }
}
