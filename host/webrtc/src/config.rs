use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A STUN or TURN server, as in the browser's `RTCIceServer`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IceServer {
    /// The server's URLs, e.g. `stun:host:port` or `turn:host:port`.
    pub urls: Vec<String>,
    /// The TURN user name; empty for STUN.
    #[serde(default)]
    pub username: String,
    /// The TURN password; empty for STUN.
    #[serde(default)]
    pub credential: String,
}

/// How the server's peers connect.
#[derive(Debug, Clone)]
pub struct RtcConfig {
    /// The address each peer's UDP socket binds to (one ephemeral port per peer). Its host
    /// candidate is this address, so it must be one the client can reach: loopback for a page
    /// on the same machine, the machine's LAN address otherwise.
    pub bind: IpAddr,
    /// STUN/TURN servers for clients the host candidate cannot reach (behind NAT); none by default.
    pub ice_servers: Vec<IceServer>,
    /// From the answer to a connected peer; a peer that never completes ICE is closed then.
    pub connect_timeout: Duration,
    /// Gathering our candidates before the answer is returned.
    pub gather_timeout: Duration,
    /// Data-channel messages above this size are dropped (and counted): actions are tiny.
    pub max_message_bytes: usize,
    /// An IDR at least this often, besides the first frame and picture-loss requests.
    pub keyframe_interval: Duration,
}

impl Default for RtcConfig {
    fn default() -> Self {
        Self {
            bind: IpAddr::from([127, 0, 0, 1]),
            ice_servers: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            gather_timeout: Duration::from_secs(3),
            max_message_bytes: 16 * 1024,
            keyframe_interval: Duration::from_secs(2),
        }
    }
}

impl RtcConfig {
    /// Parses `--webrtc-ice` values: `stun:host:port` or `turn:user:pass@host:port`
    /// (`turns:` too); errors name the value.
    pub fn parse_ice_server(s: &str) -> Result<IceServer, String> {
        let (scheme, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("ICE server `{s}`: expected stun:HOST:PORT or turn:USER:PASS@HOST:PORT"))?;
        match scheme {
            "stun" | "stuns" => {
                if rest.is_empty() || rest.contains('@') {
                    return Err(format!("ICE server `{s}`: a STUN server is stun:HOST:PORT"));
                }
                Ok(IceServer { urls: vec![s.to_string()], ..Default::default() })
            }
            "turn" | "turns" => {
                let (cred, host) = rest.rsplit_once('@').ok_or_else(|| {
                    format!("ICE server `{s}`: a TURN server needs credentials, turn:USER:PASS@HOST:PORT")
                })?;
                let (user, pass) =
                    cred.split_once(':').ok_or_else(|| format!("ICE server `{s}`: credentials are USER:PASS"))?;
                if host.is_empty() || user.is_empty() {
                    return Err(format!("ICE server `{s}`: empty host or user"));
                }
                Ok(IceServer { urls: vec![format!("{scheme}:{host}")], username: user.into(), credential: pass.into() })
            }
            _ => Err(format!("ICE server `{s}`: scheme must be stun, stuns, turn or turns")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ice_servers_parse_and_bad_ones_name_the_value() {
        let s = RtcConfig::parse_ice_server("stun:stun.example.org:3478").unwrap();
        assert_eq!(s.urls, ["stun:stun.example.org:3478"]);
        assert!(s.username.is_empty());
        let t = RtcConfig::parse_ice_server("turn:ann:s3cr:et@turn.example.org:3478").unwrap();
        assert_eq!(t.urls, ["turn:turn.example.org:3478"]);
        assert_eq!((t.username.as_str(), t.credential.as_str()), ("ann", "s3cr:et"));
        for bad in ["stun", "http://x", "turn:host:1", "turn::p@h:1", "stun:u:p@h:1"] {
            let e = RtcConfig::parse_ice_server(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
