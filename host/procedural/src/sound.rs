//! The soundtrack a clip's picture determines, and the listening that scores one.
//!
//! Each shape has a pitch (multiples of 100 Hz at least a fifth apart, so a small vocoder's mel
//! bands keep them apart and it can make them at all: below); the tone is as loud as the object is big (growing gets louder, shrinking quieter) and
//! sits in the stereo field where the object is across the frame (constant-power pan: moving
//! right moves it right). So the sound is a function of the picture, as the default model with
//! sound is trained on it, and [`listen`] reads the three cues back with plain signal analysis
//! (Goertzel filters at the five pitches, RMS over thirds of the clip) to score what a model made.

use serde::Serialize;

use crate::render::placement;
use crate::{Motion, Scene, Shape, Variation};

/// Each shape's tone in Hz, in `Shape::ALL` order: at least a fifth apart (ratio ≥ 1.5), within
/// the band every LTX-2 mel front end keeps, and whole multiples of 100 Hz: LTX-2's vocoder is
/// convolutional over mel frames 10 ms apart, so a steady mel (a held tone) comes out periodic in
/// 10 ms — it can only make harmonics of 100 Hz.
pub const PITCHES: [f32; 5] = [200.0, 300.0, 500.0, 800.0, 1200.0];

/// The canvas the placement is computed on (fractions do not depend on it).
const CANVAS: usize = 1000;

/// A stereo waveform, interleaved `[L, R, L, R, …]`, in [-1, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct Soundtrack {
    /// Samples per second.
    pub rate: u32,
    /// Interleaved left/right samples.
    pub samples: Vec<f32>,
}

impl Soundtrack {
    /// Samples per channel.
    pub fn len(&self) -> usize {
        self.samples.len() / 2
    }

    /// Whether it holds no samples.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// The pitch of `shape`.
pub fn pitch(shape: Shape) -> f32 {
    PITCHES[shape.index()]
}

/// The soundtrack of a clip of `scene` with `var`, `seconds` long at `rate`: the tone of its
/// shape, its loudness the object's size, its pan the object's place across the frame, both
/// following the object through the clip as the frames do (t from 0 to 1).
pub fn soundtrack(scene: &Scene, var: &Variation, seconds: f32, rate: u32) -> Soundtrack {
    let n = (seconds * rate as f32).round().max(1.0) as usize;
    let f = pitch(scene.shape);
    let mut samples = Vec::with_capacity(2 * n);
    // A 10 ms fade in and out: no clicks for the vocoder to learn.
    let fade = (0.01 * rate as f32).max(1.0);
    for i in 0..n {
        let t = if n > 1 { i as f32 / (n - 1) as f32 } else { 0.5 };
        let (cx, _, r) = placement(scene, var, t, CANVAS);
        let size = r / CANVAS as f32; // half-size as a canvas fraction: 0.066 .. 0.24
        let amp = (0.15 + 2.0 * size).min(0.65) * (i as f32 / fade).min(1.0) * ((n - 1 - i) as f32 / fade).min(1.0);
        let pan = (cx / CANVAS as f32).clamp(0.0, 1.0) * std::f32::consts::FRAC_PI_2;
        let v = amp * (std::f32::consts::TAU * f * i as f32 / rate as f32).sin();
        samples.push(v * pan.cos());
        samples.push(v * pan.sin());
    }
    Soundtrack { rate, samples }
}

/// Which way a cue moves over the clip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trend {
    /// Up: louder, or further right.
    Rising,
    /// Down: quieter, or further left.
    Falling,
    /// Within the dead band.
    Steady,
}

/// What [`listen`] hears in a soundtrack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Heard {
    /// The shape whose pitch carries the most energy, if a tone stands out at all.
    pub shape: Option<Shape>,
    /// Share of the signal's energy at that pitch (1 for a pure tone; near 0 for noise).
    pub tonality: f64,
    /// Loudness from the first third to the last.
    pub loudness: Trend,
    /// Stereo place from the first third to the last (rising: moving right).
    pub pan: Trend,
}

/// Reads `track` back: its pitch (and so shape), how clearly it is a tone, and which way its
/// loudness and its stereo place move.
pub fn listen(track: &Soundtrack) -> Heard {
    let n = track.len();
    let left: Vec<f32> = track.samples.iter().step_by(2).copied().collect();
    let right: Vec<f32> = track.samples.iter().skip(1).step_by(2).copied().collect();
    let mono: Vec<f32> = left.iter().zip(&right).map(|(l, r)| l + r).collect();
    let total: f64 = mono.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>().max(1e-12);
    // Energy at each pitch as a share of the whole (a pure tone gives about 1).
    let shares: Vec<f64> =
        PITCHES.iter().map(|&f| 2.0 * goertzel(&mono, f, track.rate) / (n.max(1) as f64) / total).collect();
    let (best, &share) = shares.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).expect("five pitches");
    let shape = (share > 0.2).then(|| Shape::ALL[best]);
    let third = (n / 3).max(1);
    let rms = |x: &[f32]| (x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / x.len().max(1) as f64).sqrt();
    let (head, tail) = (0..third.min(n), n.saturating_sub(third)..n);
    let loud = |r: std::ops::Range<usize>| rms(&left[r.clone()]).hypot(rms(&right[r]));
    let place = |r: std::ops::Range<usize>| rms(&right[r.clone()]).atan2(rms(&left[r])) / std::f64::consts::FRAC_PI_2;
    let trend = |a: f64, b: f64, band: f64| match b - a {
        d if d > band => Trend::Rising,
        d if d < -band => Trend::Falling,
        _ => Trend::Steady,
    };
    let (l0, l1) = (loud(head.clone()), loud(tail.clone()));
    Heard {
        shape,
        tonality: share.min(1.0),
        // Louder or quieter by a fifth of the mean level.
        loudness: trend(l0, l1, 0.2 * (l0 + l1) / 2.0),
        pan: trend(place(head), place(tail), 0.08),
    }
}

/// `|Σ x[i]·e^{-2πi f i / rate}|²`: the energy of one frequency.
fn goertzel(x: &[f32], f: f32, rate: u32) -> f64 {
    let w = std::f64::consts::TAU * f as f64 / rate as f64;
    let c = 2.0 * w.cos();
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &v in x {
        let s = v as f64 + c * s1 - s2;
        s2 = s1;
        s1 = s;
    }
    s1 * s1 + s2 * s2 - c * s1 * s2
}

/// Sound–picture agreement over a set of clips: the pitch names the prompt's shape, and where the
/// motion moves a cue (left/right: the pan; growing/shrinking: the loudness), the cue moves that
/// way.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SoundTally {
    /// Clips scored.
    pub clips: usize,
    /// Clips whose pitch was the shape's.
    pub pitch: usize,
    /// Clips whose motion moves a cue.
    pub cued: usize,
    /// Of those, clips whose cue moved the motion's way.
    pub cue: usize,
    /// Mean tonality (how clearly a tone stands out) of the clips.
    pub tonality_sum: f64,
}

/// [`SoundTally`] as fractions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SoundAccuracy {
    /// Fraction of clips whose pitch was the shape's.
    pub pitch: f64,
    /// Fraction of clips with a cued motion whose cue moved its way.
    pub cue: f64,
    /// Mean tonality.
    pub tonality: f64,
}

impl SoundTally {
    /// Scores one clip's sound against its scene; returns whether both cues agreed.
    pub fn add(&mut self, scene: &Scene, heard: &Heard) -> bool {
        let pitch = heard.shape == Some(scene.shape);
        let want = match scene.motion {
            Motion::Right => Some((heard.pan, Trend::Rising)),
            Motion::Left => Some((heard.pan, Trend::Falling)),
            Motion::Growing => Some((heard.loudness, Trend::Rising)),
            Motion::Shrinking => Some((heard.loudness, Trend::Falling)),
            Motion::Up | Motion::Down => None,
        };
        let cue = want.is_none_or(|(got, want)| got == want);
        self.clips += 1;
        self.pitch += pitch as usize;
        self.cued += want.is_some() as usize;
        self.cue += (want.is_some() && cue) as usize;
        self.tonality_sum += heard.tonality;
        pitch && cue
    }

    /// The counts as fractions (0 for none).
    pub fn accuracy(&self) -> SoundAccuracy {
        SoundAccuracy {
            pitch: self.pitch as f64 / self.clips.max(1) as f64,
            cue: self.cue as f64 / self.cued.max(1) as f64,
            tonality: self.tonality_sum / self.clips.max(1) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scene's own soundtrack is heard as its scene: the score is exact on the data.
    #[test]
    fn every_scene_is_heard_as_itself() {
        let mut tally = SoundTally::default();
        for (i, scene) in Scene::all().iter().enumerate() {
            let track = soundtrack(scene, &Variation::sample(i as u64), 17.0 / 24.0, 16_000);
            let heard = listen(&track);
            assert!(tally.add(scene, &heard), "{scene:?} heard as {heard:?}");
            assert!(heard.tonality > 0.8, "{scene:?}: tonality {}", heard.tonality);
        }
        let a = tally.accuracy();
        assert_eq!((a.pitch, a.cue), (1.0, 1.0));
        assert_eq!(tally.cued, 360, "left/right/growing/shrinking of 540");
    }

    /// Noise has no pitch, and a wrong shape's tone or a reversed pan scores as wrong.
    #[test]
    fn noise_and_wrong_cues_fail() {
        let mut x = 12345u32;
        let noise: Vec<f32> = (0..2 * 12_000)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect();
        let heard = listen(&Soundtrack { rate: 16_000, samples: noise });
        assert_eq!(heard.shape, None, "tonality {}", heard.tonality);
        let scene = Scene::all()[0];
        let right = Scene { motion: Motion::Right, ..scene };
        let left = Scene { motion: Motion::Left, ..scene };
        let heard = listen(&soundtrack(&right, &Variation::canonical(), 0.7, 16_000));
        assert_eq!(heard.pan, Trend::Rising);
        let mut tally = SoundTally::default();
        assert!(!tally.add(&left, &heard));
        let other = Scene { shape: Shape::Star, ..right };
        assert!(!tally.add(&other, &heard));
        assert_eq!((tally.pitch, tally.cue), (1, 1));
    }

    /// The five pitches are at least a fifth apart and harmonics of the mel frame rate (100 Hz),
    /// and each is heard at 24 kHz too (the 2.0 vocoder's rate).
    #[test]
    fn pitches_are_apart_and_heard_at_the_vocoders_rate() {
        for w in PITCHES.windows(2) {
            assert!(w[1] / w[0] >= 1.5, "{w:?}");
        }
        assert!(PITCHES.iter().all(|p| p % 100.0 == 0.0));
        for &shape in Shape::ALL {
            let scene = Scene { shape, ..Scene::all()[0] };
            let heard = listen(&soundtrack(&scene, &Variation::canonical(), 0.7, 24_000));
            assert_eq!(heard.shape, Some(shape));
        }
    }
}
