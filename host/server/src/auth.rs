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

#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    hashes: Vec<blake3::Hash>,
    /// `/metrics` without a key (a scraper inside the cluster).
    pub metrics_public: bool,
}

impl ApiKeys {
    pub fn new(keys: &[String], metrics_public: bool) -> Self {
        Self { hashes: keys.iter().map(|k| blake3::hash(k.as_bytes())).collect(), metrics_public }
    }

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
        let keys = ApiKeys::new(&["alpha".into(), "beta".into()], false);
        assert_eq!((keys.find("alpha"), keys.find("beta"), keys.find("gamma")), (Some(0), Some(1), None));
        assert!(keys.find("").is_none());
        assert!(keys.open_path("/health") && keys.open_path("/ready") && !keys.open_path("/metrics"));
        assert!(ApiKeys::new(&["a".into()], true).open_path("/metrics"));
        assert!(!ApiKeys::default().enabled());
    }

    #[test]
    fn owner_tags_outlive_a_reordering_of_the_keys() {
        let before = ApiKeys::new(&["alpha-key".into(), "beta-key".into()], false);
        let after = ApiKeys::new(&["beta-key".into(), "gamma-key".into()], false);
        let beta = before.owner_tag(Caller(Some(1)));
        assert!(beta.as_deref().is_some_and(|t| !t.contains("beta")));
        assert_eq!(after.caller_for(beta.as_deref()), Caller(Some(0)));
        assert_eq!(after.caller_for(before.owner_tag(Caller(Some(0))).as_deref()), Caller(Some(usize::MAX)));
        assert_eq!(after.caller_for(None), Caller(Some(usize::MAX)), "an open server's job is not a keyed caller's");
        assert_eq!(ApiKeys::default().caller_for(None), Caller(None));
        assert_eq!(ApiKeys::default().owner_tag(Caller(None)), None);
    }
}
