//! Procedural text-to-video data with a known answer.
//!
//! A [`Scene`] is one shape of one colour doing one motion on one background; its prompt is
//! plain English ("a red circle moving left on a white background"). [`render`] draws a clip of
//! it, deterministically from a seed; [`analyze`] reads a clip back with classical image
//! analysis (background from the border, object mask by colour distance, shape by template
//! IoU, motion from the centroid and area tracks). The same code makes the training data and
//! scores generated clips, so "the model drew what the prompt said" is a number.

#![deny(missing_docs)]

mod analyze;
mod paraphrase;
mod render;
mod score;
mod sound;
mod style;
mod vocab;
pub mod world;

pub use analyze::{analyze, Analysis};
pub use paraphrase::{paraphrase, paraphrase_pairs, paraphrase_words, Split};
pub use render::{render, render_styled, Clip, Variation};
pub use score::{psnr, Accuracy, Tally};
pub use sound::{listen, pitch, soundtrack, Heard, SoundAccuracy, SoundTally, Soundtrack, Trend, PITCHES};
pub use style::{object_area, Style, LARGE_FACTOR};
pub use vocab::{Background, Color, Motion, Scene, Shape};
