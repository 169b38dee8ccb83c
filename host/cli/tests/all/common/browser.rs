//! Debian's Chromium, headless, driven over the DevTools protocol: open a tab, evaluate
//! JavaScript in it (awaiting promises), close it. `host/scripts/browser.sh` installs Chromium;
//! without it the tests that need it fail with that instruction, they are never skipped.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

pub struct Browser {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

pub struct Tab {
    pub id: String,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next: u64,
}

fn chromium() -> String {
    std::env::var("FASTVIDEO_CHROMIUM").unwrap_or_else(|_| "chromium".to_string())
}

impl Browser {
    pub fn launch() -> Self {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(chromium())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--autoplay-policy=no-user-gesture-required",
                // Several tabs play at once in one test: none of them counts as in the background.
                "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows",
                "--disable-features=WebRtcHideLocalIpsWithMdns",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start Chromium (`{}`): {e}. Install it with `bash host/scripts/browser.sh` \
                     (Debian's chromium package), or point FASTVIDEO_CHROMIUM at a Chromium binary",
                    chromium()
                )
            });
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = loop {
            let line = lines.next().expect("Chromium exited before its DevTools endpoint came up").unwrap();
            if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                break rest.split('/').next().unwrap().parse::<u16>().unwrap();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Self { child, port, _profile: profile }
    }

    /// Opens `url` in a new window of its own: a page in a background tab is hidden, and a
    /// hidden page shows no video frames (`requestVideoFrameCallback` stops), so tests that run
    /// several pages at once give each its own window.
    pub fn open(&self, url: &str) -> Tab {
        let version: Value = ureq::get(&format!("http://127.0.0.1:{}/json/version", self.port))
            .call()
            .unwrap()
            .into_body()
            .read_json()
            .unwrap();
        let (mut browser, _) = tungstenite::connect(version["webSocketDebuggerUrl"].as_str().unwrap()).unwrap();
        let call = json!({"id": 1, "method": "Target.createTarget", "params": {"url": url, "newWindow": true}});
        browser.send(Message::Text(call.to_string().into())).unwrap();
        let target = loop {
            let Message::Text(t) = browser.read().expect("DevTools browser connection") else { continue };
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["id"] == 1 {
                break v["result"]["targetId"].as_str().expect("Target.createTarget answers a targetId").to_string();
            }
        };
        let _ = browser.close(None);
        let (ws, _) = tungstenite::connect(format!("ws://127.0.0.1:{}/devtools/page/{target}", self.port)).unwrap();
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        }
        Tab { id: target, ws, next: 1 }
    }

    /// Closes a tab as a user would (its page unloads, its peer connections end).
    pub fn close(&self, tab: Tab) {
        ureq::get(&format!("http://127.0.0.1:{}/json/close/{}", self.port, tab.id)).call().unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Tab {
    /// Evaluates `expr`, awaiting it if it is a promise; its value as JSON, or the exception.
    pub fn eval(&mut self, expr: &str) -> Result<Value, String> {
        let id = self.next;
        self.next += 1;
        let call = json!({"id": id, "method": "Runtime.evaluate",
            "params": {"expression": expr, "awaitPromise": true, "returnByValue": true}});
        self.ws.send(Message::Text(call.to_string().into())).map_err(|e| e.to_string())?;
        loop {
            let msg = self.ws.read().map_err(|e| format!("DevTools connection: {e}"))?;
            let Message::Text(t) = msg else { continue };
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["id"] != id {
                continue;
            }
            if let Some(ex) = v["result"].get("exceptionDetails") {
                return Err(ex["exception"]["description"].as_str().unwrap_or(&ex.to_string()).to_string());
            }
            return Ok(v["result"]["result"]["value"].clone());
        }
    }

    /// Evaluates `expr` until it is truthy, for at most `timeout`.
    pub fn wait_for(&mut self, expr: &str, timeout: Duration) -> Value {
        let t0 = std::time::Instant::now();
        loop {
            let v = self.eval(expr).unwrap_or(Value::Null);
            if !(v.is_null() || v == false || v == 0) {
                return v;
            }
            assert!(t0.elapsed() < timeout, "`{expr}` did not become true within {timeout:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
