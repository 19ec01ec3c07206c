//! A real browser for the console tests: headless Chromium (the Debian package `chromium`,
//! installed by infra/install-deps.sh) driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: JSON messages ending in NUL on the browser's fds 3 and 4, which
//! a shell maps to our stdin/stdout pipes), so no WebDriver and no websocket library is needed.
//!
//! The page's console errors and uncaught exceptions are collected from the moment it opens
//! ([`Page::errors`]).

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        Arc, Mutex,
        mpsc::{self, Receiver},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::repo_root;

/// The browser binary: `CHROMIUM` or `chromium` on PATH.
fn binary() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

pub struct Browser {
    child: Child,
    input: ChildStdin,
    replies: Receiver<Value>,
    /// Events (messages without an id), oldest first.
    events: Arc<Mutex<Vec<Value>>>,
    next_id: u64,
}

/// One open tab.
pub struct Page {
    session: String,
    /// Refused connections are expected (the server was stopped on purpose): the page's own
    /// failed fetches are not errors then.
    refused_ok: std::cell::Cell<bool>,
}

impl Page {
    /// The server behind the page was stopped on purpose.
    pub fn server_stopped(&self) {
        self.refused_ok.set(true);
    }
}

impl Browser {
    /// Starts the browser with a fresh profile under target/e2e/<name>/chromium.
    pub fn start(name: &str) -> Browser {
        let profile = repo_root().join("target/e2e").join(name).join("chromium");
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let log = std::fs::File::create(profile.with_extension("log")).unwrap();
        let cmd = format!(
            "exec {} --headless --no-sandbox --disable-gpu --no-first-run \
             --disable-extensions --disable-background-networking --user-data-dir={} \
             --window-size=1280,900 --remote-debugging-pipe 3<&0 4>&1 0</dev/null 1>&2",
            binary(),
            profile.display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &cmd])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("sh");
        let input = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (tx, replies) = mpsc::channel();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            while out.read_until(0, &mut buf).unwrap_or(0) > 0 {
                buf.pop_if(|b| *b == 0);
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if v.get("id").is_some() {
                        let _ = tx.send(v);
                    } else {
                        sink.lock().unwrap().push(v);
                    }
                }
                buf.clear();
            }
        });
        let mut b = Browser {
            child,
            input,
            replies,
            events,
            next_id: 0,
        };
        let v = b.call(None, "Browser.getVersion", json!({}));
        assert!(
            v["product"].is_string(),
            "chromium did not answer over the DevTools pipe (is the Debian package `chromium` \
             installed? infra/install-deps.sh installs it): {v}"
        );
        b
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.input
            .write_all(&bytes)
            .and_then(|_| self.input.flush())
            .unwrap_or_else(|e| panic!("chromium's DevTools pipe closed ({method}): {e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .replies
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("chromium: no answer to {method} in 30 s"));
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Opens `url` in a new tab, with its console and exceptions reported.
    pub fn open(&mut self, url: &str) -> Page {
        let target = self.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        let session = attached["sessionId"].as_str().unwrap().to_string();
        for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
            self.call(Some(&session), domain, json!({}));
        }
        self.call(Some(&session), "Page.navigate", json!({"url": url}));
        Page {
            session,
            refused_ok: false.into(),
        }
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, page: &Page, expression: &str) -> Value {
        let r = self.call(
            Some(&page.session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    /// The page's visible text.
    pub fn text(&mut self, page: &Page) -> String {
        let v = self.eval(page, "document.body ? document.body.innerText : ''");
        v.as_str().unwrap_or_default().to_string()
    }

    /// Waits (at most `timeout`) until the page's text satisfies `ok`; returns the text. Fails
    /// at once on a console error.
    pub fn wait_text(
        &mut self,
        page: &Page,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let text = self.text(page);
            if ok(&text) {
                return text;
            }
            let errors = self.errors(page);
            assert!(
                errors.is_empty(),
                "console errors while waiting for {what}: {:#?}\nthe page shows:\n{text}",
                &errors[..errors.len().min(3)]
            );
            assert!(
                Instant::now() < deadline,
                "the page did not show {what} within {timeout:?}; it shows:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Saves a PNG of the page as it is now (the whole page, not just the window).
    pub fn screenshot(&mut self, page: &Page, path: &std::path::Path) {
        use base64::Engine as _;
        let r = self.call(
            Some(&page.session),
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Uncaught exceptions, `console.error` calls and error log entries of `page` so far.
    pub fn errors(&self, page: &Page) -> Vec<String> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|e| e["sessionId"] == page.session.as_str())
            .filter_map(|e| {
                let p = &e["params"];
                match e["method"].as_str()? {
                    "Runtime.exceptionThrown" => {
                        let d = &p["exceptionDetails"];
                        let what = d["exception"]["description"].as_str().unwrap_or_default();
                        Some(format!(
                            "{}: {what}",
                            d["text"].as_str().unwrap_or("exception")
                        ))
                    }
                    "Runtime.consoleAPICalled" if p["type"] == "error" => {
                        Some(format!("console.error: {}", p["args"]))
                    }
                    "Log.entryAdded"
                        if p["entry"]["level"] == "error"
                            && !(page.refused_ok.get()
                                && p["entry"]["text"]
                                    .as_str()
                                    .is_some_and(|t| t.contains("ERR_CONNECTION_REFUSED"))) =>
                    {
                        Some(format!("log: {}", p["entry"]["text"]))
                    }
                    _ => None,
                }
            })
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
