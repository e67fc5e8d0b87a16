//! The element type of a GPU's activations and their gradients: `f32`, or bf16 (`half::bf16`,
//! the top half of an fp32) under `--precision bf16`. Parameters, their gradients, optimizer
//! state and batch norm's statistics are fp32 either way; kernels compute in fp32 and only load
//! and store this type (`kernels/elem.cuh`). Each kernel that touches activations exists once
//! per type, named `{op}_f32` / `{op}_bf16` (`named!`).

use cudarc::cublas::sys::cudaDataType;
use cudarc::cudnn::CudnnDataType;
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DeviceRepr, ValidAsZeroBits};

pub use half::bf16;

pub trait Elem:
    DeviceRepr + ValidAsZeroBits + CudnnDataType + Copy + Default + Unpin + Send + Sync + 'static
{
    /// Whether this is bf16 (kernel names, cuDNN's math, the weights' copy).
    const BF16: bool;
    /// cuBLAS's name for it.
    const CUDA: cudaDataType;
    /// Bytes per element.
    const BYTES: usize = std::mem::size_of::<Self>();
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
    /// The view as f32 where this type is f32 (for the own kernels that only exist in fp32:
    /// im2col convolutions), else None.
    fn f32_view<'a, 'b>(v: &'b CudaView<'a, Self>) -> Option<&'b CudaView<'a, f32>>;
    fn f32_view_mut<'a, 'b>(
        v: &'b mut CudaViewMut<'a, Self>,
    ) -> Option<&'b mut CudaViewMut<'a, f32>>;
    /// An f32 view as this type where this type is f32 (an fp32 run writes weight gradients
    /// straight into its gradient buffer), else None.
    fn from_f32_view_mut<'a, 'b>(
        v: &'b mut CudaViewMut<'a, f32>,
    ) -> Option<&'b mut CudaViewMut<'a, Self>>;
    /// What products read as weights: the fp32 parameters themselves, or their bf16 copy.
    fn weights<'a>(params: &'a CudaSlice<f32>, copy: &'a CudaSlice<Self>) -> &'a CudaSlice<Self>;
}

impl Elem for f32 {
    const BF16: bool = false;
    const CUDA: cudaDataType = cudaDataType::CUDA_R_32F;
    fn from_f32(x: f32) -> f32 {
        x
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn f32_view<'a, 'b>(v: &'b CudaView<'a, f32>) -> Option<&'b CudaView<'a, f32>> {
        Some(v)
    }
    fn f32_view_mut<'a, 'b>(
        v: &'b mut CudaViewMut<'a, f32>,
    ) -> Option<&'b mut CudaViewMut<'a, f32>> {
        Some(v)
    }
    fn from_f32_view_mut<'a, 'b>(
        v: &'b mut CudaViewMut<'a, f32>,
    ) -> Option<&'b mut CudaViewMut<'a, f32>> {
        Some(v)
    }
    fn weights<'a>(params: &'a CudaSlice<f32>, _: &'a CudaSlice<f32>) -> &'a CudaSlice<f32> {
        params
    }
}

impl Elem for bf16 {
    const BF16: bool = true;
    const CUDA: cudaDataType = cudaDataType::CUDA_R_16BF;
    /// Rounded to nearest even, as the kernels' `bf16_bits` and `nn::bf16::to_bf16`.
    fn from_f32(x: f32) -> bf16 {
        bf16::from_bits(crate::nn::bf16::to_bf16(x))
    }
    fn to_f32(self) -> f32 {
        crate::nn::bf16::from_bf16(self.to_bits())
    }
    fn f32_view<'a, 'b>(_: &'b CudaView<'a, bf16>) -> Option<&'b CudaView<'a, f32>> {
        None
    }
    fn f32_view_mut<'a, 'b>(
        _: &'b mut CudaViewMut<'a, bf16>,
    ) -> Option<&'b mut CudaViewMut<'a, f32>> {
        None
    }
    fn from_f32_view_mut<'a, 'b>(
        _: &'b mut CudaViewMut<'a, f32>,
    ) -> Option<&'b mut CudaViewMut<'a, bf16>> {
        None
    }
    fn weights<'a>(_: &'a CudaSlice<f32>, copy: &'a CudaSlice<bf16>) -> &'a CudaSlice<bf16> {
        copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_converts_as_the_kernels_do() {
        assert_eq!(<f32 as Elem>::from_f32(1.1).to_f32(), 1.1);
        // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1)
        let tie = 1.0 + 1.0 / 256.0;
        assert_eq!(<bf16 as Elem>::from_f32(tie).to_f32(), 1.0);
        assert_eq!(<bf16 as Elem>::from_f32(3.0).to_f32(), 3.0);
        assert_eq!((<f32 as Elem>::BYTES, <bf16 as Elem>::BYTES), (4, 2));
        assert_eq!(named!(bf16, "relu"), "relu_bf16");
        assert_eq!(named!(f32, "relu"), "relu_f32");
    }
}
