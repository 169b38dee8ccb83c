//! The chunk-KV pool of causal models (DESIGN §3, CacheManager): self-attention keys and values
//! of the latent frames a causal rollout has committed, in fixed-size slabs — one slab holds one
//! latent frame's keys and values at one layer — carved from one arena under a byte budget.
//!
//! A session reserves `window × layers` slabs when it opens, so it can never run out mid-rollout
//! and a pool that is full refuses at open time with a clear error. Inside its reservation the
//! session keeps its first `sink` frames for good and the most recent frames after them; once
//! the window is full each new frame overwrites the oldest non-sink frame (an eviction, counted).
//! Closing a session (or dropping its [`KvSession`]) returns its slabs.
//!
//! [`SlabState`] is the bookkeeping alone (no tensors), unit-tested without a device.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tch::{Device, Kind, Tensor};

/// Why the pool refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KvError {
    /// Opening the session needs more free slabs than the pool has.
    #[error(
        "kv pool: a window of {window} frames needs {needed_mib} MiB of key/value slabs, the pool has {free_mib} MiB \
         free of {capacity_mib} MiB; ask for a smaller window or close other sessions"
    )]
    Budget {
        /// The window asked for, in frames.
        window: usize,
        /// Size of the slabs the session needs, in MiB.
        needed_mib: u64,
        /// Size of the free slabs, in MiB.
        free_mib: u64,
        /// Size of all the pool's slabs, in MiB.
        capacity_mib: u64,
    },
    /// The window is empty or not larger than the sink.
    #[error("kv pool: window {window} must be at least 1 and larger than sink {sink}")]
    Window {
        /// The window asked for, in frames.
        window: usize,
        /// The sink frames asked for.
        sink: usize,
    },
    /// The session id is not (or no longer) open.
    #[error("kv pool: session {0} is not open")]
    Closed(u64),
    /// A frame index was committed that is not after the session's last committed frame.
    #[error("kv pool: frame {frame} of session {session} comes after frame {last}; frames are committed in order")]
    Order {
        /// The session id.
        session: u64,
        /// The frame index that was refused.
        frame: u64,
        /// The last frame index committed.
        last: u64,
    },
}

/// Counters for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Slabs the pool holds in all.
    pub capacity_slabs: u64,
    /// Slabs reserved by open sessions.
    pub used_slabs: u64,
    /// Sessions open now.
    pub sessions: u64,
    /// Frames overwritten to make room, over the pool's life.
    pub evictions: u64,
    /// Sessions opened over the pool's life.
    pub opened: u64,
    /// Sessions closed over the pool's life.
    pub closed: u64,
}

#[derive(Debug)]
struct SessionSlabs {
    /// `window × layers` slab ids: position `p`, layer `l` is `slabs[p * layers + l]`.
    slabs: Vec<u32>,
    window: usize,
    sink: usize,
    /// Committed frames in the window, oldest first: (frame index, window position).
    frames: VecDeque<(u64, usize)>,
    /// The sink frames (the first `sink` committed), kept apart from `frames`.
    sinks: Vec<(u64, usize)>,
}

/// Slab bookkeeping: which slabs are free, which session holds which.
#[derive(Debug)]
pub struct SlabState {
    layers: usize,
    capacity: u32,
    free: Vec<u32>,
    sessions: HashMap<u64, SessionSlabs>,
    next_session: u64,
    slab_bytes: u64,
    evictions: u64,
    opened: u64,
    closed: u64,
}

impl SlabState {
    /// `capacity` free slabs of `slab_bytes` each, for a model of `layers` layers (at least 1).
    pub fn new(capacity: u32, layers: usize, slab_bytes: u64) -> Self {
        Self {
            layers: layers.max(1),
            capacity,
            // Popped from the end: hand out low ids first.
            free: (0..capacity).rev().collect(),
            sessions: HashMap::new(),
            next_session: 1,
            slab_bytes,
            evictions: 0,
            opened: 0,
            closed: 0,
        }
    }

    /// Reserves a session's `window × layers` slabs.
    pub fn open(&mut self, window: usize, sink: usize) -> Result<u64, KvError> {
        if window == 0 || sink >= window {
            return Err(KvError::Window { window, sink });
        }
        let need = window * self.layers;
        if need > self.free.len() {
            let mib = |slabs: usize| (slabs as u64 * self.slab_bytes) >> 20;
            return Err(KvError::Budget {
                window,
                needed_mib: mib(need),
                free_mib: mib(self.free.len()),
                capacity_mib: mib(self.capacity as usize),
            });
        }
        let slabs = self.free.split_off(self.free.len() - need);
        let id = self.next_session;
        self.next_session += 1;
        self.opened += 1;
        self.sessions.insert(id, SessionSlabs { slabs, window, sink, frames: VecDeque::new(), sinks: Vec::new() });
        Ok(id)
    }

    /// Returns the session's slabs; closing twice is a no-op.
    pub fn close(&mut self, session: u64) {
        if let Some(s) = self.sessions.remove(&session) {
            self.free.extend(s.slabs);
            self.closed += 1;
        }
    }

    /// Takes a window position for `frame` (the next frame in order): a free one while the
    /// window fills, then the oldest non-sink frame's. Returns the position and the evicted
    /// frame, if any.
    pub fn commit(&mut self, session: u64, frame: u64) -> Result<(usize, Option<u64>), KvError> {
        let s = self.sessions.get_mut(&session).ok_or(KvError::Closed(session))?;
        let last = s.frames.back().or(s.sinks.last()).map(|&(f, _)| f);
        if let Some(last) = last.filter(|&l| frame <= l) {
            return Err(KvError::Order { session, frame, last });
        }
        let held = s.sinks.len() + s.frames.len();
        if held < s.window {
            if s.sinks.len() < s.sink {
                s.sinks.push((frame, held));
            } else {
                s.frames.push_back((frame, held));
            }
            return Ok((held, None));
        }
        let (old, pos) = s.frames.pop_front().expect("a full window holds a non-sink frame (sink < window)");
        s.frames.push_back((frame, pos));
        self.evictions += 1;
        Ok((pos, Some(old)))
    }

    /// The window positions a chunk of `chunk` new frames attends to, in frame order: every
    /// committed frame if at most `window - chunk` are held, else the sink frames and the most
    /// recent `window - chunk - sinks` others.
    pub fn visible(&self, session: u64, chunk: usize) -> Result<Vec<(u64, usize)>, KvError> {
        let s = self.sessions.get(&session).ok_or(KvError::Closed(session))?;
        let room = s.window.saturating_sub(chunk);
        let mut out: Vec<(u64, usize)> = s.sinks.iter().copied().take(room).collect();
        let rest = room - out.len();
        out.extend(s.frames.iter().skip(s.frames.len().saturating_sub(rest)).copied());
        Ok(out)
    }

    /// The slab of window position `pos` at `layer`.
    pub fn slab(&self, session: u64, pos: usize, layer: usize) -> Result<u32, KvError> {
        let s = self.sessions.get(&session).ok_or(KvError::Closed(session))?;
        Ok(s.slabs[pos * self.layers + layer])
    }

    /// The pool's counters now.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            capacity_slabs: self.capacity as u64,
            used_slabs: (self.capacity as usize - self.free.len()) as u64,
            sessions: self.sessions.len() as u64,
            evictions: self.evictions,
            opened: self.opened,
            closed: self.closed,
        }
    }
}

/// What one slab holds: keys and values of up to `tokens_per_frame` tokens of width `dim`.
#[derive(Debug, Clone, Copy)]
pub struct KvPoolConfig {
    /// Attention layers of the model; a session holds one slab per layer per window frame.
    pub layers: usize,
    /// The most tokens a latent frame may have (smaller frames use a prefix of the slab).
    pub tokens_per_frame: i64,
    /// Width of one key or value token.
    pub dim: i64,
    /// Element type of the arena.
    pub kind: Kind,
    /// Where the arena is allocated.
    pub device: Device,
    /// Bytes the arena may take; the pool holds as many whole slabs as fit.
    pub budget_bytes: u64,
}

impl KvPoolConfig {
    /// Bytes of one slab: keys and values of `tokens_per_frame` tokens of width `dim`.
    pub fn slab_bytes(&self) -> u64 {
        2 * self.tokens_per_frame as u64 * self.dim as u64 * self.kind.elt_size_in_bytes() as u64
    }
}

/// The pool: bookkeeping plus the arena `[slabs, 2, tokens_per_frame, dim]` (keys, values).
pub struct KvPool {
    cfg: KvPoolConfig,
    state: Mutex<SlabState>,
    arena: Tensor,
}

// SAFETY: the arena is written only through `&self` methods that hold `state`'s lock for the
// session they write, and sessions own disjoint slabs; libtorch tensors may be used from any thread.
unsafe impl Sync for KvPool {}
unsafe impl Send for KvPool {}

impl KvPool {
    /// Allocates the arena: as many whole slabs as fit in the budget.
    pub fn new(cfg: KvPoolConfig) -> Arc<Self> {
        let capacity = (cfg.budget_bytes / cfg.slab_bytes().max(1)).min(u32::MAX as u64) as u32;
        let arena = Tensor::zeros([capacity as i64, 2, cfg.tokens_per_frame, cfg.dim], (cfg.kind, cfg.device));
        Arc::new(Self { state: Mutex::new(SlabState::new(capacity, cfg.layers, cfg.slab_bytes())), cfg, arena })
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &KvPoolConfig {
        &self.cfg
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SlabState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session of `window` frames, `sink` of them kept for good.
    pub fn open(self: &Arc<Self>, window: usize, sink: usize) -> Result<KvSession, KvError> {
        let id = self.state().open(window, sink)?;
        Ok(KvSession { pool: self.clone(), id, committed: 0 })
    }

    /// The pool's counters now (for `/metrics`).
    pub fn stats(&self) -> PoolStats {
        self.state().stats()
    }
}

/// One session's handle into the pool; dropping it returns the slabs.
pub struct KvSession {
    pool: Arc<KvPool>,
    id: u64,
    committed: u64,
}

impl KvSession {
    /// The session's id in the pool (appears in errors).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Frames committed so far (the next frame's index).
    pub fn committed_frames(&self) -> u64 {
        self.committed
    }

    /// Keys and values a chunk of `chunk` frames attends to at `layer`, `[1, frames × tokens, dim]`
    /// each in frame order, or `None` before anything was committed.
    pub fn past(&self, layer: usize, chunk: usize, tokens: i64) -> Result<Option<(Tensor, Tensor)>, KvError> {
        let st = self.pool.state();
        let visible = st.visible(self.id, chunk)?;
        if visible.is_empty() {
            return Ok(None);
        }
        let ids = visible
            .iter()
            .map(|&(_, pos)| st.slab(self.id, pos, layer).map(|s| s as i64))
            .collect::<Result<Vec<_>, _>>()?;
        drop(st);
        let idx = Tensor::from_slice(&ids).to_device(self.pool.cfg.device);
        let g = self.pool.arena.index_select(0, &idx).narrow(2, 0, tokens); // [n, 2, tokens, dim]
        let dim = self.pool.cfg.dim;
        let take = |i: i64| g.select(1, i).reshape([1, -1, dim]);
        Ok(Some((take(0), take(1))))
    }

    /// Stores the keys and values of the next frames, per layer: `kv[l]` is `([1, F × tokens, dim],
    /// same)` for `F` frames of `tokens` tokens each. Returns the frames evicted to make room.
    pub fn commit(&mut self, kv: &[(Tensor, Tensor)], frames: usize) -> Result<Vec<u64>, KvError> {
        let mut st = self.pool.state();
        let layers = kv.len();
        let mut evicted = Vec::new();
        for f in 0..frames {
            let (pos, ev) = st.commit(self.id, self.committed)?;
            evicted.extend(ev);
            for (l, (k, v)) in kv.iter().enumerate().take(layers) {
                let tokens = k.size()[1] / frames as i64;
                let slab = self.pool.arena.get(st.slab(self.id, pos, l)? as i64);
                slab.get(0).narrow(0, 0, tokens).copy_(&k.get(0).narrow(0, f as i64 * tokens, tokens));
                slab.get(1).narrow(0, 0, tokens).copy_(&v.get(0).narrow(0, f as i64 * tokens, tokens));
            }
            self.committed += 1;
        }
        Ok(evicted)
    }
}

impl Drop for KvSession {
    fn drop(&mut self) {
        self.pool.state().close(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_that_does_not_fit_is_refused_with_the_sizes() {
        let mut s = SlabState::new(10, 2, 1 << 20);
        let a = s.open(4, 1).unwrap(); // 8 slabs
        let err = s.open(2, 0).unwrap_err(); // needs 4, 2 free
        assert_eq!(err, KvError::Budget { window: 2, needed_mib: 4, free_mib: 2, capacity_mib: 10 });
        assert!(err.to_string().contains("window of 2 frames needs 4 MiB"), "{err}");
        s.close(a);
        assert!(s.open(2, 0).is_ok());
        assert!(matches!(s.open(3, 3), Err(KvError::Window { .. })));
    }

    #[test]
    fn no_slab_leaks_after_a_thousand_sessions() {
        let mut s = SlabState::new(64, 3, 1024);
        for i in 0..1000u64 {
            let a = s.open(4, 1).unwrap();
            let b = s.open(5, 0).unwrap();
            for f in 0..(i % 9) {
                s.commit(a, f).unwrap();
                s.commit(b, f).unwrap();
            }
            s.close(a);
            s.close(b);
            s.close(b);
        }
        let st = s.stats();
        assert_eq!((st.used_slabs, st.sessions, st.opened, st.closed), (0, 0, 2000, 2000));
        let mut free = s.free.clone();
        free.sort_unstable();
        assert_eq!(free, (0..64).collect::<Vec<_>>(), "every slab back exactly once");
    }

    #[test]
    fn eviction_keeps_the_sinks_and_drops_the_oldest_other_frame() {
        let mut s = SlabState::new(100, 1, 1);
        let id = s.open(4, 1).unwrap();
        for f in 0..4 {
            assert_eq!(s.commit(id, f).unwrap(), (f as usize, None));
        }
        // Window full (frames 0..4, 0 is the sink): 4 replaces 1, 5 replaces 2, 6 replaces 3.
        assert_eq!(s.commit(id, 4).unwrap(), (1, Some(1)));
        assert_eq!(s.commit(id, 5).unwrap(), (2, Some(2)));
        assert_eq!(s.commit(id, 6).unwrap(), (3, Some(3)));
        assert_eq!(s.commit(id, 7).unwrap(), (1, Some(4)));
        assert_eq!(s.stats().evictions, 4);
        let frames = |chunk| s.visible(id, chunk).unwrap().into_iter().map(|(f, _)| f).collect::<Vec<_>>();
        assert_eq!(frames(0), [0, 5, 6, 7]);
        // A chunk of 2 new frames leaves room for 2: the sink and the newest.
        assert_eq!(frames(2), [0, 7]);
        assert!(matches!(s.commit(id, 7), Err(KvError::Order { .. })));
    }

    #[test]
    fn without_sinks_the_window_slides() {
        let mut s = SlabState::new(100, 2, 1);
        let id = s.open(3, 0).unwrap();
        for f in 0..7 {
            s.commit(id, f).unwrap();
        }
        let frames: Vec<u64> = s.visible(id, 1).unwrap().into_iter().map(|(f, _)| f).collect();
        assert_eq!(frames, [5, 6]);
        assert!(s.slab(id, 2, 1).is_ok());
        s.close(id);
        assert_eq!(s.visible(id, 1), Err(KvError::Closed(id)));
    }

    #[test]
    fn the_arena_returns_what_was_committed_in_frame_order() {
        let cfg = KvPoolConfig {
            layers: 2,
            tokens_per_frame: 4,
            dim: 3,
            kind: Kind::Float,
            device: Device::Cpu,
            budget_bytes: 1 << 16,
        };
        let pool = KvPool::new(cfg);
        let mut s = pool.open(3, 1).unwrap();
        assert!(s.past(0, 1, 4).unwrap().is_none());
        let frames = |start: i64, n: i64| {
            (0..2)
                .map(|l| {
                    let k = Tensor::arange_start(start * 12, (start + n) * 12, (Kind::Float, Device::Cpu)).view([
                        1,
                        n * 4,
                        3,
                    ]) + 1000.0 * l as f64;
                    (k.shallow_clone(), -k)
                })
                .collect::<Vec<_>>()
        };
        assert!(s.commit(&frames(0, 2), 2).unwrap().is_empty());
        let (k, v) = s.past(1, 1, 4).unwrap().unwrap();
        assert!(k.equal(&frames(0, 2)[1].0) && v.equal(&frames(0, 2)[1].1));
        // Frame 2 fills the window, frame 3 evicts frame 1; a 1-frame chunk then sees 0 and 3.
        assert!(s.commit(&frames(2, 1), 1).unwrap().is_empty());
        assert_eq!(s.commit(&frames(3, 1), 1).unwrap(), [1]);
        let (k, _) = s.past(0, 1, 4).unwrap().unwrap();
        let want = Tensor::cat(&[frames(0, 1)[0].0.shallow_clone(), frames(3, 1)[0].0.shallow_clone()], 1);
        assert!(k.equal(&want));
        assert_eq!(pool.stats().used_slabs, 6);
        drop(s);
        assert_eq!(pool.stats().used_slabs, 0);
    }
}
