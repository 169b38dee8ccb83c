//! Content-addressed cache of text embeddings: repeated prompts (and the negative prompt every
//! CFG request shares) are encoded once.
//!
//! The key is blake3 of (encoder identity, weight epoch, sequence length, text); the identity
//! names the weights (path, size, modification time of the checkpoint), and the epoch is bumped
//! whenever weights change in place (adapters), which empties the cache.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use anyhow::Result;
use tch::Tensor;

/// Called with `true` on a hit and `false` on a miss (wired to metrics by the server).
pub type CacheObserver = Box<dyn Fn(bool) + Send + Sync>;

/// Text embeddings of one text encoder, shared by every request (and thread) that encodes with
/// it; when full, the oldest inserted entry is evicted.
pub struct EmbeddingCache {
    identity: String,
    capacity: usize,
    epoch: AtomicU64,
    inner: Mutex<Lru>,
    hits: AtomicU64,
    misses: AtomicU64,
    observer: OnceLock<CacheObserver>,
}

#[derive(Default)]
struct Lru {
    map: HashMap<[u8; 32], Tensor>,
    order: VecDeque<[u8; 32]>,
}

impl EmbeddingCache {
    /// An empty cache for the encoder named by `identity`, holding up to `capacity` entries
    /// (0 disables caching).
    pub fn new(identity: impl Into<String>, capacity: usize) -> Self {
        Self {
            identity: identity.into(),
            capacity,
            epoch: AtomicU64::new(0),
            inner: Mutex::new(Lru::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            observer: OnceLock::new(),
        }
    }

    /// Sets the hit/miss observer (once; later calls are ignored).
    pub fn observe(&self, f: CacheObserver) {
        let _ = self.observer.set(f);
    }

    /// Weights changed: nothing cached so far is valid.
    pub fn bump_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        *self.inner.lock().unwrap() = Lru::default();
    }

    /// `(hits, misses)` since the cache was made (epoch bumps do not reset them).
    pub fn stats(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }

    fn key(&self, len: usize, text: &str) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(self.identity.as_bytes());
        h.update(&[0]);
        h.update(&self.epoch.load(Ordering::SeqCst).to_le_bytes());
        h.update(&(len as u64).to_le_bytes());
        h.update(text.as_bytes());
        *h.finalize().as_bytes()
    }

    fn record(&self, hit: bool) {
        if hit { &self.hits } else { &self.misses }.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = self.observer.get() {
            f(hit);
        }
    }

    /// The embedding of `text` at sequence length `len`, computed by `encode` on a miss. The
    /// lock is not held while encoding.
    pub fn get_or_encode(&self, len: usize, text: &str, encode: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
        let key = self.key(len, text);
        if let Some(t) = self.inner.lock().unwrap().map.get(&key) {
            self.record(true);
            return Ok(t.shallow_clone());
        }
        self.record(false);
        let t = encode()?;
        if self.capacity > 0 {
            let mut g = self.inner.lock().unwrap();
            if g.map.insert(key, t.shallow_clone()).is_none() {
                g.order.push_back(key);
            }
            while g.order.len() > self.capacity {
                if let Some(old) = g.order.pop_front() {
                    g.map.remove(&old);
                }
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn repeated_text_is_encoded_once_and_epochs_invalidate() {
        let cache = EmbeddingCache::new("enc-a", 8);
        let seen = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        cache.observe(Box::new(move |hit| {
            s.fetch_add(if hit { 100 } else { 1 }, Ordering::Relaxed);
        }));
        let calls = AtomicU64::new(0);
        let enc = |v: f32| {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(Tensor::from(v))
        };
        let a = cache.get_or_encode(16, "a red circle", || enc(1.0)).unwrap();
        let b = cache.get_or_encode(16, "a red circle", || enc(2.0)).unwrap();
        assert_eq!(f32::try_from(&b).unwrap(), f32::try_from(&a).unwrap());
        let _ = cache.get_or_encode(32, "a red circle", || enc(3.0)).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 2, "a different length is a different key");
        assert_eq!(cache.stats(), (1, 2));
        assert_eq!(seen.load(Ordering::Relaxed), 102);
        cache.bump_epoch();
        let c = cache.get_or_encode(16, "a red circle", || enc(4.0)).unwrap();
        assert_eq!(f32::try_from(&c).unwrap(), 4.0);
    }

    #[test]
    fn identities_do_not_share_entries_and_capacity_evicts_oldest() {
        let a = EmbeddingCache::new("enc-a", 2);
        let b = EmbeddingCache::new("enc-b", 2);
        assert_ne!(a.key(1, "x"), b.key(1, "x"));
        for t in ["x", "y", "z"] {
            let _ = a.get_or_encode(1, t, || Ok(Tensor::from(0f32))).unwrap();
        }
        let _ = a.get_or_encode(1, "x", || Ok(Tensor::from(0f32))).unwrap();
        assert_eq!(a.stats(), (0, 4), "x was evicted by z");
        let _ = a.get_or_encode(1, "z", || Ok(Tensor::from(0f32))).unwrap();
        assert_eq!(a.stats(), (1, 4));
    }
}
