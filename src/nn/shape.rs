//! The shape of one sample as a layer sees it: an image CxHxW or a flat vector.

use std::fmt;

/// A tensor shape per sample: an image CxHxW or a flat vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Image { c: usize, h: usize, w: usize },
    Flat(usize),
}

impl Shape {
    /// Elements per sample (shapes out of a `Plan` never overflow).
    pub fn numel(&self) -> usize {
        self.checked_numel().expect("shape overflows usize")
    }

    pub fn checked_numel(&self) -> Option<usize> {
        match *self {
            Shape::Image { c, h, w } => c.checked_mul(h)?.checked_mul(w),
            Shape::Flat(n) => Some(n),
        }
    }
}

/// `1x28x28`, or `784` for a flat vector.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Image { c, h, w } => write!(f, "{c}x{h}x{w}"),
            Shape::Flat(n) => write!(f, "{n}"),
        }
    }
}
