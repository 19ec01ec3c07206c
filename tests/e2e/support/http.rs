//! HTTP for the observability tests, by hand over tokio (no client library): GET the relay's
//! endpoint, parse a Prometheus scrape, and receive webhooks.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use outbox_service::events;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::relay::Relay;

/// `GET path` with `Connection: close`; returns (status, body).
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| panic!("GET {addr}{path}: no answer in 10 s"))
        .unwrap_or_else(|e| panic!("GET {addr}{path}: {e}"));
    let text = String::from_utf8(buf).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("HTTP response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    (status, body.to_string())
}

/// The address of the relay's HTTP endpoint, from its `http_listening` log line.
pub async fn relay_addr(relay: &Relay) -> SocketAddr {
    let needle = format!("{} addr=", events::HTTP_LISTENING);
    relay.wait_log(&needle, Duration::from_secs(60)).await;
    let log = relay.log_text();
    let rest = &log[log.find(&needle).unwrap() + needle.len()..];
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// One sample of a scrape.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed Prometheus text exposition (format 0.0.4).
#[derive(Debug, Default)]
pub struct Scrape {
    pub samples: Vec<Sample>,
    /// Family name → type, from `# TYPE` lines.
    pub types: BTreeMap<String, String>,
}

impl Scrape {
    /// Parses `text`, panicking on any line that is not valid exposition format.
    pub fn parse(text: &str) -> Scrape {
        let mut s = Scrape::default();
        for line in text.lines() {
            if line.trim().is_empty() || line.starts_with("# HELP ") {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, ty) = rest.split_once(' ').expect("# TYPE name type");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                    "bad type in {line:?}"
                );
                s.types.insert(name.to_string(), ty.to_string());
                continue;
            }
            assert!(!line.starts_with('#'), "unexpected comment {line:?}");
            let (series, value) = line.rsplit_once(' ').expect("sample: series value");
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series, BTreeMap::new()),
                Some((name, rest)) => {
                    let inner = rest.strip_suffix('}').expect("closing brace");
                    let mut labels = BTreeMap::new();
                    for pair in inner.split("\",").filter(|p| !p.is_empty()) {
                        let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                        labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                    }
                    (name, labels)
                }
            };
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "bad metric name in {line:?}"
            );
            s.samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
        s
    }

    /// The value of `name` with exactly these labels (all of them).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    /// Sum of every sample of `name`, whatever its labels (None if there is none).
    pub fn sum(&self, name: &str) -> Option<f64> {
        let v: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }

    /// The family a sample name belongs to (histogram suffixes stripped).
    pub fn family_of(&self, sample: &str) -> Option<&str> {
        if self.types.contains_key(sample) {
            return self.types.get_key_value(sample).map(|(k, _)| k.as_str());
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = sample.strip_suffix(suffix)
                && let Some((k, _)) = self.types.get_key_value(base)
            {
                return Some(k.as_str());
            }
        }
        None
    }
}

/// Scrapes the relay's `/metrics`.
pub async fn scrape(addr: SocketAddr) -> Scrape {
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "/metrics answered {status}: {body}");
    Scrape::parse(&body)
}

/// An HTTP server that accepts POSTed JSON bodies and keeps them.
pub struct WebhookReceiver {
    pub url: String,
    bodies: Arc<Mutex<Vec<serde_json::Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl WebhookReceiver {
    pub async fn start() -> WebhookReceiver {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/relay", l.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let store = bodies.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let store = store.clone();
                tokio::spawn(async move {
                    if let Some(body) = read_request(&mut s).await {
                        let v = serde_json::from_slice(&body).unwrap_or_else(
                            |e| serde_json::json!({ "invalid_json": e.to_string() }),
                        );
                        store.lock().unwrap().push(v);
                    }
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                });
            }
        });
        WebhookReceiver { url, bodies, task }
    }

    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.bodies.lock().unwrap().clone()
    }

    /// Waits up to `timeout` for a body with these fields (`body[name] == value` for each).
    pub async fn wait_for(&self, fields: &[(&str, &str)], timeout: Duration) -> serde_json::Value {
        let what = format!("a webhook with {fields:?}");
        super::eventually(&what, timeout, || async {
            self.bodies()
                .into_iter()
                .find(|b| fields.iter().all(|(k, v)| b[*k] == *v))
        })
        .await
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request and returns its body (by Content-Length).
async fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(head.starts_with("post "), "webhook must POST: {head}");
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(buf[end + 4..end + 4 + len].to_vec());
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
