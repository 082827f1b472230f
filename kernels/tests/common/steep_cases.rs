// The steep regions at small precisions, `(function, precision bits, from, to, k, unit
// bits)`: exp and sinh far from 0, tan next to its pole at pi/2, exp of a negative argument.
// One table for the two tests that force the steep split on them: `kernels/tests/pipeline.rs`
// (against brute force) and `kernels/src/search/unit.rs`'s (against the halving routes), each
// `include!`s it with `Function` in scope.
pub const STEEP_CASES: [(Function, u32, &str, &str, u32, u32); 4] = [
    (Function::Exp, 24, "0x1p+4", "0x1.08p+4", 15, 18),
    (Function::Sinh, 22, "0x1p+5", "0x1.2p+5", 14, 18),
    (Function::Tan, 22, "0x1.8p+0", "0x1.92p+0", 14, 18),
    (Function::Exp, 22, "-0x1.6p+5", "-0x1.4p+5", 14, 18),
];
