//! API keys: with any configured, every route but the probes (`/health`, `/ready`), the world
//! page's HTML and — if the operator opens it — `/metrics` needs `Authorization: Bearer KEY`, as
//! the `openai` client sends it. Browsers cannot set headers on a WebSocket, so `?api_key=KEY`
//! is taken too. Keys are compared as blake3 hashes, whose equality is constant-time, and every
//! key is compared, so the time taken says nothing about which key nearly matched.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Who is calling: the index of their API key, `None` on a server without keys. Jobs belong to
/// the key that created them; another key sees them as not found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caller(pub Option<usize>);

/// The API keys a server accepts (only their hashes are kept), and the priority each may ask for.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    hashes: Vec<blake3::Hash>,
    /// Per key: the highest `priority` its requests may ask for (`None`: the server's bound).
    bounds: Vec<Option<i32>>,
    /// The bound of keys without their own, and of everyone on a server without keys.
    max_priority: i32,
    /// `/metrics` without a key (a scraper inside the cluster).
    pub metrics_public: bool,
}

/// The lowest `priority` taken: asking to go later is anyone's right, within reason.
pub const MIN_PRIORITY: i32 = -1000;

impl ApiKeys {
    /// Keys as configured: `KEY`, or `KEY max_priority=N` to let that key's requests ask for
    /// priorities up to N. A malformed entry is an error that does not repeat the key.
    pub fn new(specs: &[String], metrics_public: bool) -> Result<Self, String> {
        let mut keys = Self { metrics_public, ..Default::default() };
        for (i, spec) in specs.iter().enumerate() {
            let mut words = spec.split_whitespace();
            let key = words.next().ok_or_else(|| format!("API key {}: empty", i + 1))?;
            let mut bound = None;
            for w in words {
                let n = w
                    .strip_prefix("max_priority=")
                    .and_then(|n| n.parse::<i32>().ok())
                    .filter(|n| *n >= MIN_PRIORITY)
                    .ok_or_else(|| format!("API key {}: `{w}` is not max_priority=N (N ≥ {MIN_PRIORITY})", i + 1))?;
                bound = Some(n);
            }
            keys.hashes.push(blake3::hash(key.as_bytes()));
            keys.bounds.push(bound);
        }
        Ok(keys)
    }

    /// The bound for keys that name none, and on a server without keys (default 0: raising a
    /// request above the others is granted per key).
    pub fn with_max_priority(mut self, bound: i32) -> Self {
        self.max_priority = bound;
        self
    }

    /// The highest priority `who` may ask for.
    pub fn max_priority(&self, who: Caller) -> i32 {
        who.0.and_then(|i| self.bounds.get(i).copied().flatten()).unwrap_or(self.max_priority)
    }

    /// A request's `priority`, checked against the caller's bound: a 400 naming `priority`.
    pub fn check_priority(&self, who: Caller, priority: Option<i32>) -> Result<(), crate::error::ApiError> {
        let Some(p) = priority else { return Ok(()) };
        let max = self.max_priority(who);
        if p > max {
            return Err(crate::error::ApiError::field(
                "priority",
                format!(
                    "priority: {p} is above what this API key may ask for ({max}); the operator grants more per key"
                ),
            ));
        }
        if p < MIN_PRIORITY {
            return Err(crate::error::ApiError::field("priority", format!("priority: {p} is below {MIN_PRIORITY}")));
        }
        Ok(())
    }

    /// Whether the server requires a key (any were configured).
    pub fn enabled(&self) -> bool {
        !self.hashes.is_empty()
    }

    /// Which key `token` is (its index), if any.
    pub fn find(&self, token: &str) -> Option<usize> {
        let h = blake3::hash(token.as_bytes());
        let mut found = None;
        for (i, k) in self.hashes.iter().enumerate() {
            if *k == h {
                found = Some(i);
            }
        }
        found
    }

    /// What the job store records as a job's owner: derived from the key's hash, so the store
    /// never holds a key, and stable across restarts whatever order the keys are given in.
    pub fn owner_tag(&self, who: Caller) -> Option<String> {
        let h = self.hashes.get(who.0?)?;
        Some(blake3::derive_key("fastvideo job owner v1", h.as_bytes()).iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The caller a stored owner tag belongs to now. A job whose key is no longer configured
    /// (or that was made on a server without keys, when this one has them) belongs to nobody:
    /// it stays unlisted until it expires.
    pub fn caller_for(&self, tag: Option<&str>) -> Caller {
        let nobody = Caller(Some(usize::MAX));
        match tag {
            None if !self.enabled() => Caller(None),
            None => nobody,
            Some(t) => (0..self.hashes.len())
                .find(|&i| self.owner_tag(Caller(Some(i))).as_deref() == Some(t))
                .map_or(nobody, |i| Caller(Some(i))),
        }
    }

    fn open_path(&self, path: &str) -> bool {
        matches!(path, "/health" | "/ready" | "/world") || (path == "/metrics" && self.metrics_public)
    }
}

/// The bearer token of a request, or its `api_key` query parameter.
fn token(req: &Request) -> Option<&str> {
    if let Some(v) = req.headers().get(axum::http::header::AUTHORIZATION) {
        return v.to_str().ok()?.strip_prefix("Bearer ").map(str::trim);
    }
    req.uri().query()?.split('&').find_map(|kv| kv.strip_prefix("api_key="))
}

/// The middleware: passes open paths and requests with a known key, answers 401 otherwise. It
/// takes the keys alone, not the whole server state, so this module needs nothing of the state.
pub async fn require_key(State(keys): State<Arc<ApiKeys>>, mut req: Request, next: Next) -> Response {
    if !keys.enabled() || keys.open_path(req.uri().path()) {
        req.extensions_mut().insert(Caller(None));
        return next.run(req).await;
    }
    match token(&req).map(|t| keys.find(t)) {
        Some(Some(i)) => {
            req.extensions_mut().insert(Caller(Some(i)));
            next.run(req).await
        }
        Some(_) => {
            ApiError::Unauthorized { message: "the API key is not one this server accepts".into() }.into_response()
        }
        None => {
            ApiError::Unauthorized { message: "this server needs an API key: send `Authorization: Bearer KEY`".into() }
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_value_and_probes_stay_open() {
        let keys = ApiKeys::new(&["alpha".into(), "beta".into()], false).unwrap();
        assert_eq!((keys.find("alpha"), keys.find("beta"), keys.find("gamma")), (Some(0), Some(1), None));
        assert!(keys.find("").is_none());
        assert!(keys.open_path("/health") && keys.open_path("/ready") && !keys.open_path("/metrics"));
        assert!(ApiKeys::new(&["a".into()], true).unwrap().open_path("/metrics"));
        assert!(!ApiKeys::default().enabled());
    }

    #[test]
    fn owner_tags_outlive_a_reordering_of_the_keys() {
        let before = ApiKeys::new(&["alpha-key".into(), "beta-key max_priority=3".into()], false).unwrap();
        let after = ApiKeys::new(&["beta-key".into(), "gamma-key".into()], false).unwrap();
        let beta = before.owner_tag(Caller(Some(1)));
        assert!(beta.as_deref().is_some_and(|t| !t.contains("beta")));
        assert_eq!(after.caller_for(beta.as_deref()), Caller(Some(0)));
        assert_eq!(after.caller_for(before.owner_tag(Caller(Some(0))).as_deref()), Caller(Some(usize::MAX)));
        assert_eq!(after.caller_for(None), Caller(Some(usize::MAX)), "an open server's job is not a keyed caller's");
        assert_eq!(ApiKeys::default().caller_for(None), Caller(None));
        assert_eq!(ApiKeys::default().owner_tag(Caller(None)), None);
    }

    #[test]
    fn priorities_are_bounded_per_key() {
        let keys =
            ApiKeys::new(&["alpha-key max_priority=5".into(), "beta-key".into()], false).unwrap().with_max_priority(1);
        assert_eq!((keys.find("alpha-key"), keys.find("alpha-key max_priority=5")), (Some(0), None));
        let (alpha, beta) = (Caller(Some(0)), Caller(Some(1)));
        assert_eq!((keys.max_priority(alpha), keys.max_priority(beta)), (5, 1));
        assert!(keys.check_priority(alpha, Some(5)).is_ok() && keys.check_priority(beta, Some(-3)).is_ok());
        let e = keys.check_priority(beta, Some(2)).unwrap_err().body();
        assert_eq!(e["error"]["param"], "priority");
        assert!(e["error"]["message"].as_str().unwrap().contains("(1)"), "{e}");
        assert!(keys.check_priority(alpha, Some(MIN_PRIORITY - 1)).is_err());
        assert_eq!(ApiKeys::default().max_priority(Caller(None)), 0);
        for bad in ["k max_priority=x", "k priority=3", "k max_priority=-5000"] {
            let e = ApiKeys::new(&[bad.into()], false).unwrap_err();
            assert!(e.contains("API key 1") && !e.contains("k max"), "{e}");
        }
    }
}
