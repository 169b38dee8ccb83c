//! Where a delivery may go and how it is signed: an operator's allowlist (`--webhook-allow URL_PREFIX`) that a request's `webhook` URL must fall
//! under, so a client cannot make the server call into its own network, and the Standard
//! Webhooks signature (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64
//! HMAC-SHA256 of "id.timestamp.body">` with a `whsec_` secret).

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use url::Url;

/// One allowed destination prefix: scheme, host and port exactly, and a path prefix that ends at
/// a segment boundary.
#[derive(Clone, Debug, PartialEq)]
struct Allowed {
    scheme: String,
    host: String,
    port: u16,
    path: String,
}

/// The destinations deliveries may go to; empty refuses every webhook.
#[derive(Clone, Debug, Default)]
pub struct WebhookPolicy {
    allowed: Vec<Allowed>,
}

/// Why a webhook URL was refused (the 400's message; its field is `webhook`).
pub type Refusal = String;

fn parse(url: &str) -> Result<(Url, Allowed), Refusal> {
    let u = Url::parse(url).map_err(|e| format!("webhook: `{url}` is not a URL ({e})"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("webhook: scheme `{}`; only http and https", u.scheme()));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("webhook: credentials in the URL are not accepted".into());
    }
    if u.fragment().is_some() {
        return Err("webhook: a fragment (#…) is not sent to servers; drop it".into());
    }
    let host = u.host_str().ok_or_else(|| format!("webhook: `{url}` has no host"))?.to_ascii_lowercase();
    let port = u.port_or_known_default().ok_or_else(|| format!("webhook: `{url}` has no port"))?;
    let path = u.path().to_string();
    Ok((u.clone(), Allowed { scheme: u.scheme().into(), host, port, path }))
}

impl WebhookPolicy {
    /// From the operator's prefixes; a malformed prefix is an error naming it.
    pub fn new(prefixes: &[String]) -> Result<Self, Refusal> {
        let allowed = prefixes
            .iter()
            .map(|p| {
                let (u, mut a) = parse(p).map_err(|e| format!("--webhook-allow {p}: {e}"))?;
                if u.query().is_some() {
                    return Err(format!("--webhook-allow {p}: a prefix has no query"));
                }
                if !a.path.ends_with('/') {
                    a.path.push('/');
                }
                Ok(a)
            })
            .collect::<Result<_, Refusal>>()?;
        Ok(Self { allowed })
    }

    /// The URL deliveries for this request go to, or why it is refused.
    pub fn check(&self, url: &str) -> Result<Url, Refusal> {
        if self.allowed.is_empty() {
            return Err("webhook: this server delivers no webhooks (no --webhook-allow)".into());
        }
        let (u, a) = parse(url)?;
        let under = |p: &Allowed| {
            p.scheme == a.scheme
                && p.host == a.host
                && p.port == a.port
                && (a.path == p.path.trim_end_matches('/') || a.path.starts_with(&p.path))
        };
        if self.allowed.iter().any(under) {
            Ok(u)
        } else {
            Err(format!("webhook: `{url}` is not under an allowed destination (--webhook-allow)"))
        }
    }
}

/// The `webhook-signature` value for a delivery: `v1,` and the base64 HMAC-SHA256 of
/// `"{id}.{timestamp}.{body}"` under the secret (`whsec_` + base64 key, as Standard Webhooks
/// writes it; a secret without the prefix is used as raw bytes).
pub fn sign(secret: &str, id: &str, timestamp: u64, body: &[u8]) -> Result<String, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = match secret.strip_prefix("whsec_") {
        Some(k) => b64.decode(k).map_err(|e| format!("webhook secret: not base64 after whsec_ ({e})"))?,
        None => secret.as_bytes().to_vec(),
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|e| format!("webhook secret: {e}"))?;
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    Ok(format!("v1,{}", b64.encode(mac.finalize().into_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_webhooks_test_vector_signs_alike() {
        let sig = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        )
        .unwrap();
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(sign("whsec_!!", "m", 1, b"").unwrap_err().contains("base64"));
    }

    #[test]
    fn only_urls_under_an_allowed_prefix_pass() {
        let p = WebhookPolicy::new(&["https://hooks.example.com/fv".into(), "http://10.0.0.5:8080/".into()]).unwrap();
        for ok in [
            "https://hooks.example.com/fv",
            "https://hooks.example.com/fv/job?x=1",
            "https://HOOKS.example.com:443/fv/a",
            "http://10.0.0.5:8080/anything",
        ] {
            assert!(p.check(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("https://hooks.example.com/fvx", "not under"),
            ("https://hooks.example.com.evil.net/fv", "not under"),
            ("https://user:pw@hooks.example.com/fv", "credentials"),
            ("https://hooks.example.com@evil.net/fv", "credentials"),
            ("http://hooks.example.com/fv", "not under"),
            ("https://hooks.example.com:8443/fv", "not under"),
            ("ftp://hooks.example.com/fv", "scheme"),
            ("file:///etc/passwd", "scheme"),
            ("http://10.0.0.5:8081/", "not under"),
            ("http://[::1]:8080/", "not under"),
            ("https://hooks.example.com/fv#frag", "fragment"),
            ("not a url", "not a URL"),
        ] {
            let e = p.check(bad).unwrap_err();
            assert!(e.starts_with("webhook") && e.contains(why), "{bad}: {e}");
        }
        assert!(WebhookPolicy::default().check("https://a.example/").unwrap_err().contains("no webhooks"));
        assert!(WebhookPolicy::new(&["https://a.example/?q=1".into()]).unwrap_err().contains("query"));
    }
}
