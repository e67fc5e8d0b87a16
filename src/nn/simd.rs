//! The hot elementwise loops of the CPU backend compiled twice: for the baseline x86-64 the
//! binary targets (SSE2, 4 lanes) and for AVX2 + FMA (8 lanes), picked at run time. Every x86-64
//! server of the last decade has AVX2, and the binary still runs where it is missing. (Matrix
//! products already pick their kernel at run time inside `matrixmultiply`.)

/// Whether this CPU runs the AVX2 + FMA copies (checked once by std, then a load).
pub fn wide() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `pub fn name(args) [-> T] { body }` becomes that function, dispatching to a copy of the body
/// compiled with AVX2 + FMA where `wide()` holds.
macro_rules! twice {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn wide($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if $crate::nn::simd::wide() {
                    // SAFETY: the CPU has the features `wide` was compiled for.
                    return unsafe { wide($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use twice;

/// Independent partial sums of a reduction: enough for the compiler to keep several SIMD
/// accumulators in flight (one would wait on its own latency every step).
const LANES: usize = 32;

twice! {
    /// The sum of `x`, in `LANES` partial sums added in order at the end.
    pub fn lane_sum(x: &[f32]) -> f32 {
        let mut acc = [0.0f32; LANES];
        let chunks = x.chunks_exact(LANES);
        let rest: f32 = chunks.remainder().iter().sum();
        for c in chunks {
            for l in 0..LANES {
                acc[l] += c[l];
            }
        }
        acc.iter().sum::<f32>() + rest
    }
}

twice! {
    /// y[N] += a * x.
    pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y += a * x;
        }
    }
}

twice! {
    /// The sum of a[i] * b[i], in `LANES` partial sums added in order at the end.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0.0f32; LANES];
        let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        let rest: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
        for (x, y) in ca.zip(cb) {
            for l in 0..LANES {
                acc[l] += x[l] * y[l];
            }
        }
        acc.iter().sum::<f32>() + rest
    }
}
