//! LoRA in a pack: each sample runs with its own adapter set (or none), so each stream's rows
//! are grouped by the samples their tokens belong to, and the unmerged path
//! ([`Linear::forward_lora`]) adds each group's deltas to its own rows only. A pack in which no
//! sample has adapters builds nothing and costs nothing.

use anyhow::{ensure, Result};
use fastvideo_pipeline::{AdapterRows, AdapterSet};
use tch::Tensor;

use super::Layout;
use crate::adapters::LinearAdapters;
use crate::{Linear, Lora};

/// Which rows of each of a pack's activations run with which adapter set.
pub struct PackedLora<'a> {
    /// Per-sample rows `[B, …]`: the time embedding and the modulations made of it.
    pub samples: AdapterRows<'a>,
    /// The image stream's tokens.
    pub image: AdapterRows<'a>,
    /// The text stream's tokens.
    pub text: AdapterRows<'a>,
    /// The joint sequence's tokens (each sample's text, then its image).
    pub joint: AdapterRows<'a>,
}

impl Layout {
    /// The rows of each stream for samples running with `sets` (by sample; `None`: without
    /// adapters), or `None` when no sample has any. Samples with different sets modulate
    /// differently even at one time, so their modulations are no longer broadcast.
    pub fn lora<'a>(&mut self, sets: &[Option<&'a AdapterSet>]) -> Option<PackedLora<'a>> {
        if sets.iter().all(|s| s.is_none_or(AdapterSet::is_empty)) {
            return None;
        }
        let first = sets[0].map(|s| s.key().to_string());
        if sets.iter().any(|s| s.map(|s| s.key()) != first.as_deref()) {
            self.one_time = false;
        }
        let rows = |lengths: &mut dyn Iterator<Item = i64>| {
            let mut rows = AdapterRows::default();
            let mut start = 0;
            for (set, n) in sets.iter().zip(lengths) {
                rows.push(*set, start, n);
                start += n;
            }
            rows
        };
        let joint = &mut self.text.iter().zip(&self.image).map(|(t, i)| t + i);
        Some(PackedLora {
            samples: rows(&mut std::iter::repeat(1)),
            image: rows(&mut self.image.iter().copied()),
            text: rows(&mut self.text.iter().copied()),
            joint: rows(joint),
        })
    }
}

/// `f(x, rows)` for activations `x` of a stream (`[1, S, C]`, or rows `[S, C]`): with adapters
/// the tokens become the rows of dimension 0 that `rows` groups, as the unmerged path reads them.
pub fn with_rows(x: &Tensor, rows: Lora, f: impl FnOnce(&Tensor, Lora) -> Tensor) -> Tensor {
    let Some(rows) = rows else { return f(x, None) };
    let mut shape = x.size();
    let c = shape.pop().unwrap_or(1);
    let y = f(&x.reshape([-1, c]), Some(rows));
    shape.push(y.size()[1]);
    y.view(shape.as_slice())
}

/// `lin(x)` for a stream's activations `x` whose rows run with `rows`' adapters.
pub fn linear(lin: &Linear, x: &Tensor, rows: Lora) -> Tensor {
    with_rows(x, rows, |x, r| lin.forward_lora(x, r))
}

impl<'a> PackedLora<'a> {
    /// The per-sample rows of `copies` copies of a `[B, …]` tensor stacked along the rows (a
    /// modulation of `cat([temb, temb_at_0])`), `samples` = B.
    pub fn samples_stacked(&self, samples: i64, copies: i64) -> AdapterRows<'a> {
        let mut rows = AdapterRows::default();
        for c in 0..copies {
            for &(set, start, len) in &self.samples.groups {
                rows.push(Some(set), c * samples + start, len);
            }
        }
        rows
    }
}

impl LinearAdapters {
    /// The rows of a pack of `layout` whose samples run with `sets` (by sample), for the sets
    /// not merged ([`unmerged_sets`](Self::unmerged_sets)); `model` names it in errors.
    pub fn packed<'a>(
        &self,
        layout: &mut Layout,
        sets: &[Option<&'a AdapterSet>],
        model: &str,
    ) -> Result<Option<PackedLora<'a>>> {
        ensure!(sets.len() == layout.len(), "{model}: {} adapter sets for {} samples", sets.len(), layout.len());
        let sets = self.unmerged_sets(sets).map_err(|e| anyhow::anyhow!("{model}: {e}"))?;
        Ok(layout.lora(&sets))
    }
}
