//! The chunked feature cache: the last frames each causal conv saw, carried from one chunk to the
//! next so chunked coding equals coding the whole clip.

use tch::Tensor;

/// Frames of history each causal conv keeps between chunks (`CACHE_T` upstream).
pub(super) const CACHE_T: i64 = 2;

/// One cache slot per causal conv call site, visited in the same order every chunk.
pub(super) enum Slot {
    Empty,
    /// The upsampler's "first chunk, nothing to repeat yet" marker (`"Rep"` upstream).
    Rep,
    Frames(Tensor),
}

#[derive(Default)]
pub(super) struct FeatCache {
    slots: Vec<Slot>,
    idx: usize,
}

impl FeatCache {
    /// Nothing cached yet: the next chunk is a stream's first.
    pub(super) fn is_fresh(&self) -> bool {
        self.slots.is_empty()
    }
    pub(super) fn rewind(&mut self) {
        self.idx = 0;
    }
    pub(super) fn next(&mut self) -> &mut Slot {
        if self.idx == self.slots.len() {
            self.slots.push(Slot::Empty);
        }
        self.idx += 1;
        &mut self.slots[self.idx - 1]
    }
}

/// Last `CACHE_T` frames of `x`, padded in front with the last cached frame when `x` is short.
pub(super) fn frames_to_cache(x: &Tensor, prev: &Slot) -> Tensor {
    let t = x.size()[2];
    let n = t.min(CACHE_T);
    let tail = x.narrow(2, t - n, n).copy();
    match prev {
        Slot::Frames(p) if n < CACHE_T => {
            let pt = p.size()[2];
            Tensor::cat(&[p.narrow(2, pt - 1, 1), tail], 2)
        }
        _ => tail,
    }
}
