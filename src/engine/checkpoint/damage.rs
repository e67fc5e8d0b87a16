//! What is wrong with a damaged safetensors file (a checkpoint's weights, an `--init` or
//! `export` file), in words a user can act on.

/// What is wrong with a safetensors file, in words (the crate's own Display is its Debug).
pub fn safetensors_problem(e: &safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    let name = |n: &str| crate::data::read::excerpt(n);
    match e {
        E::HeaderTooSmall => "shorter than its 8-byte header length".into(),
        E::InvalidHeaderLength => "its header length runs past the end of the file".into(),
        E::HeaderTooLarge => "its first 8 bytes claim a header of over 100 MB".into(),
        E::InvalidHeader => "its header is not UTF-8 text".into(),
        E::InvalidHeaderStart => "its header does not start with `{`".into(),
        E::InvalidHeaderDeserialization | E::JsonError(_) => {
            "its header is not a safetensors JSON header".into()
        }
        E::TensorNotFound(n) => format!("tensor `{}` is missing", name(n)),
        E::InvalidOffset(n) => format!("tensor `{}`'s byte offsets are out of place", name(n)),
        E::TensorInvalidInfo | E::InvalidTensorView(..) => {
            "a tensor's shape, type and byte offsets disagree".into()
        }
        E::MetadataIncompleteBuffer => {
            "its length is not what its header's tensors add up to".into()
        }
        E::ValidationOverflow => "a tensor's shape is too large to be real".into(),
        E::IoError(e) => e.to_string(),
    }
}
