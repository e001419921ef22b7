// Exact float operations, the one place of the rule: from its #include on, the compiler fuses no multiply and add
// of the translation unit into an FMA (an explicit fma stays one). Each output's float operations are then the
// ones written, in every template instance and on every path, so a row's bits do not depend on which tile shape,
// path or M computed it, and row dequantization rounds twice, as numpy does.
// A kernel source includes it after the intrinsics headers (vec/vec.h, arm_neon.h, immintrin.h): gcc's optimize
// pragma would otherwise apply to their inline functions too, which then differ in options from their callers.
// No include guard: the pragma is a state of the translation unit from where it stands.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
