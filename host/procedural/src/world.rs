//! A procedural world that actions drive: a red ball in a walled box moves where the action says
//! (walls stop it), while a blue square drifts on its own and bounces off the walls. The world
//! model is trained on it, and [`ActionScore`] checks generated rollouts with the same
//! simulator: did the ball move as the action said, and is it still there and sharp.
//!
//! Time: actions apply per latent frame of the video VAE (4 video frames); the first video
//! frame stands alone (latent frame 0), so latent frame `k >= 1` covers video frames
//! `4k-3..=4k` and its action moves the ball on each of them.

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::render::inside;
use crate::{Clip, Shape};

/// Video frames per latent frame (the VAE's temporal factor).
pub const FRAMES_PER_STEP: usize = 4;
/// Ball travel per video frame, in canvas fractions (2 px at 64×64).
const BALL_SPEED: f32 = 2.0 / 64.0;
const BALL_RADIUS: f32 = 7.0 / 64.0;
const SQUARE_RADIUS: f32 = 6.0 / 64.0;
const BALL_RGB: [u8; 3] = [220, 30, 30];
const SQUARE_RGB: [u8; 3] = [30, 60, 220];

/// What moves the ball for one latent frame: a direction or staying put.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The ball stays where it is.
    None,
    /// Towards the top wall.
    Up,
    /// Towards the bottom wall.
    Down,
    /// Towards the left wall.
    Left,
    /// Towards the right wall.
    Right,
}

impl Action {
    /// Every action, in the order [`index`](Self::index) counts.
    pub const ALL: [Action; 5] = [Action::None, Action::Up, Action::Down, Action::Left, Action::Right];

    /// The action's name, as datasets and sessions spell it.
    pub fn word(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Up => "up",
            Action::Down => "down",
            Action::Left => "left",
            Action::Right => "right",
        }
    }

    /// Position in [`ALL`](Self::ALL): the id a dataset stores.
    pub fn index(self) -> usize {
        Self::ALL.iter().position(|a| *a == self).expect("in ALL")
    }

    /// The action named `w` ([`word`](Self::word)'s inverse); `None` for an unknown word.
    pub fn from_word(w: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|a| a.word() == w)
    }

    /// Unit direction, y pointing down.
    fn dir(self) -> (f32, f32) {
        match self {
            Action::None => (0.0, 0.0),
            Action::Up => (0.0, -1.0),
            Action::Down => (0.0, 1.0),
            Action::Left => (-1.0, 0.0),
            Action::Right => (1.0, 0.0),
        }
    }
}

/// Positions in canvas fractions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorldState {
    /// The red ball's centre, which actions move.
    pub ball: (f32, f32),
    /// The blue square's centre, which drifts on its own.
    pub square: (f32, f32),
    /// The square's travel per video frame; a wall flips the component that hit it.
    pub square_velocity: (f32, f32),
}

/// Moves `p` by `d`, keeping a disc of radius `r` inside the unit box.
fn clamp_move(p: (f32, f32), d: (f32, f32), r: f32) -> (f32, f32) {
    ((p.0 + d.0).clamp(r, 1.0 - r), (p.1 + d.1).clamp(r, 1.0 - r))
}

impl WorldState {
    /// A random start for `seed`: both objects inside the walls, the square drifting in a random
    /// direction.
    pub fn sample(seed: u64) -> Self {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut pos = |r: f32| (rng.random_range(r..1.0 - r), rng.random_range(r..1.0 - r));
        let (ball, square) = (pos(BALL_RADIUS), pos(SQUARE_RADIUS));
        let speed = rng.random_range(0.8..1.6) / 64.0;
        let angle: f32 = rng.random_range(0.0..std::f32::consts::TAU);
        Self { ball, square, square_velocity: (speed * angle.cos(), speed * angle.sin()) }
    }

    /// One video frame of time under `action`.
    pub fn step(&mut self, action: Action) {
        let (dx, dy) = action.dir();
        self.ball = clamp_move(self.ball, (dx * BALL_SPEED, dy * BALL_SPEED), BALL_RADIUS);
        let (mut vx, mut vy) = self.square_velocity;
        let (x, y) = (self.square.0 + vx, self.square.1 + vy);
        let lo = SQUARE_RADIUS;
        let hi = 1.0 - SQUARE_RADIUS;
        let bounce = |p: f32, v: &mut f32| {
            if p < lo {
                *v = v.abs();
                2.0 * lo - p
            } else if p > hi {
                *v = -v.abs();
                2.0 * hi - p
            } else {
                p
            }
        };
        let x = bounce(x, &mut vx);
        let y = bounce(y, &mut vy);
        self.square = (x, y);
        self.square_velocity = (vx, vy);
    }

    /// RGB8 frame, `size`×`size`, white background, the square under the ball.
    pub fn draw(&self, size: usize) -> Vec<u8> {
        let mut rgb = vec![255u8; size * size * 3];
        let s = size as f32;
        for (shape, (cx, cy), r, color) in
            [(Shape::Square, self.square, SQUARE_RADIUS, SQUARE_RGB), (Shape::Circle, self.ball, BALL_RADIUS, BALL_RGB)]
        {
            let (cx, cy, r) = (cx * s, cy * s, r * s);
            let (x0, x1) = (((cx - r - 1.0).max(0.0)) as usize, ((cx + r + 1.0).min(s - 1.0)) as usize);
            let (y0, y1) = (((cy - r - 1.0).max(0.0)) as usize, ((cy + r + 1.0).min(s - 1.0)) as usize);
            for y in y0..=y1 {
                for x in x0..=x1 {
                    let mut hits = 0;
                    for sy in 0..4 {
                        for sx in 0..4 {
                            let px = x as f32 + (sx as f32 + 0.5) / 4.0;
                            let py = y as f32 + (sy as f32 + 0.5) / 4.0;
                            hits += inside(shape, (px - cx) / r, (py - cy) / r) as u32;
                        }
                    }
                    if hits == 0 {
                        continue;
                    }
                    let a = hits as f32 / 16.0;
                    let i = (y * size + x) * 3;
                    for c in 0..3 {
                        rgb[i + c] = (rgb[i + c] as f32 * (1.0 - a) + color[c] as f32 * a).round() as u8;
                    }
                }
            }
        }
        rgb
    }
}

/// A rendered rollout: `1 + 4·(actions.len() - 1)` frames, `actions[0]` unused (latent frame 0
/// is the lone first frame), and the ball's true centre per frame (canvas fractions).
pub fn rollout(start: WorldState, actions: &[Action], size: usize) -> (Clip, Vec<(f32, f32)>) {
    let mut state = start;
    let mut rgb = state.draw(size);
    let mut ball = vec![state.ball];
    for &a in actions.iter().skip(1) {
        for _ in 0..FRAMES_PER_STEP {
            state.step(a);
            rgb.extend(state.draw(size));
            ball.push(state.ball);
        }
    }
    (Clip { frames: ball.len(), height: size, width: size, rgb }, ball)
}

/// Random action sequences for training: each action held for 1–4 latent frames, `none` a
/// fifth of the time.
pub fn sample_actions(seed: u64, steps: usize) -> Vec<Action> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_ac71);
    let mut out = vec![Action::None];
    while out.len() < steps {
        let a = Action::ALL[rng.random_range(0..5)];
        for _ in 0..rng.random_range(1..=4) {
            out.push(a);
        }
    }
    out.truncate(steps);
    out
}

/// Where the ball is in a frame: the centroid (canvas fractions) and area (pixels) of the
/// pixels near its colour, or `None` when fewer than a quarter of its pixels are found.
pub fn locate_ball(frame: &[u8], size: usize) -> Option<((f32, f32), usize)> {
    let (mut n, mut sx, mut sy) = (0usize, 0f32, 0f32);
    for y in 0..size {
        for x in 0..size {
            let i = (y * size + x) * 3;
            let d: f32 = (0..3).map(|c| (frame[i + c] as f32 - BALL_RGB[c] as f32).powi(2)).sum::<f32>().sqrt();
            if d < 90.0 {
                n += 1;
                sx += x as f32 + 0.5;
                sy += y as f32 + 0.5;
            }
        }
    }
    let full = std::f32::consts::PI * (BALL_RADIUS * size as f32).powi(2);
    (n as f32 >= 0.25 * full).then(|| ((sx / n as f32 / size as f32, sy / n as f32 / size as f32), n))
}

/// Whether the ball went from `p` to `q` (canvas fractions) as `action` held for `frames`
/// frames says, from where it was, walls included, within 3 px at 64×64.
pub fn moved_as_commanded(p: (f32, f32), q: (f32, f32), action: Action, frames: usize) -> bool {
    let (dx, dy) = action.dir();
    let steps = frames as f32 * BALL_SPEED;
    let want = clamp_move(p, (dx * steps, dy * steps), BALL_RADIUS);
    (q.0 - want.0).abs() <= FOLLOW_TOLERANCE && (q.1 - want.1).abs() <= FOLLOW_TOLERANCE
}

/// Scores rollouts the model generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ActionScore {
    /// Chunks whose ball displacement matched the action (judged from where the ball was).
    pub followed: usize,
    /// Chunks scored: latent frames after the first that the clip covers.
    pub chunks: usize,
    /// Frames where the ball was found (and not smeared below a quarter of its area or above
    /// twice it).
    pub found: usize,
    /// Frames looked at.
    pub frames: usize,
}

/// Tolerance on a chunk's displacement, in canvas fractions (3 px at 64×64).
const FOLLOW_TOLERANCE: f32 = 3.0 / 64.0;

impl ActionScore {
    /// Adds a generated clip made under `actions` (as [`rollout`] lays them out).
    pub fn add(&mut self, clip: &Clip, actions: &[Action]) {
        let size = clip.width;
        let full = std::f32::consts::PI * (BALL_RADIUS * size as f32).powi(2);
        let found: Vec<Option<(f32, f32)>> = (0..clip.frames)
            .map(|f| locate_ball(clip.frame(f), size).filter(|&(_, a)| (a as f32) < 2.0 * full).map(|(c, _)| c))
            .collect();
        self.frames += clip.frames;
        self.found += found.iter().filter(|f| f.is_some()).count();
        for (k, &a) in actions.iter().enumerate().skip(1) {
            let (before, after) = (FRAMES_PER_STEP * (k - 1), FRAMES_PER_STEP * k);
            if after >= clip.frames {
                break;
            }
            self.chunks += 1;
            let (Some(p), Some(q)) = (found[before], found[after]) else { continue };
            if moved_as_commanded(p, q, a, FRAMES_PER_STEP) {
                self.followed += 1;
            }
        }
    }

    /// Fraction of chunks whose ball moved as the action said (0 for none).
    pub fn follow_rate(&self) -> f64 {
        self.followed as f64 / self.chunks.max(1) as f64
    }

    /// Fraction of frames where the ball was found (0 for none).
    pub fn found_rate(&self) -> f64 {
        self.found as f64 / self.frames.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ball_follows_actions_and_stops_at_walls() {
        let start = WorldState { ball: (0.5, 0.5), square: (0.2, 0.2), square_velocity: (0.01, 0.0) };
        let mut s = start;
        for _ in 0..4 {
            s.step(Action::Right);
        }
        assert!((s.ball.0 - (0.5 + 8.0 / 64.0)).abs() < 1e-6 && s.ball.1 == 0.5);
        for _ in 0..100 {
            s.step(Action::Up);
        }
        assert!((s.ball.1 - BALL_RADIUS).abs() < 1e-6, "stopped by the top wall: {:?}", s.ball);
        // The square bounced and stayed inside.
        assert!(s.square.0 >= SQUARE_RADIUS && s.square.0 <= 1.0 - SQUARE_RADIUS);
    }

    #[test]
    fn the_score_accepts_the_simulator_and_rejects_a_wrong_action() {
        let actions = sample_actions(3, 12);
        let (clip, truth) = rollout(WorldState::sample(3), &actions, 64);
        assert_eq!(clip.frames, 1 + 4 * 11);
        let found = locate_ball(clip.frame(20), 64).unwrap().0;
        assert!((found.0 - truth[20].0).abs() < 1.0 / 64.0 && (found.1 - truth[20].1).abs() < 1.0 / 64.0);
        let mut right = ActionScore::default();
        right.add(&clip, &actions);
        assert_eq!((right.followed, right.chunks), (11, 11));
        assert_eq!(right.found, clip.frames);
        // The same clip judged against other actions fails wherever the ball had room to move.
        let wrong: Vec<Action> =
            actions.iter().map(|a| if *a == Action::Left { Action::Right } else { Action::Left }).collect();
        let mut bad = ActionScore::default();
        bad.add(&clip, &wrong);
        assert!(bad.follow_rate() < 0.5, "{bad:?}");
        // A blank clip has no ball anywhere.
        let blank = Clip { frames: 5, height: 64, width: 64, rgb: vec![255; 5 * 64 * 64 * 3] };
        let mut none = ActionScore::default();
        none.add(&blank, &actions[..2]);
        assert_eq!((none.found, none.followed, none.chunks), (0, 0, 1));
    }
}
