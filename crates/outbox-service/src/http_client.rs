//! A minimal HTTP/1.1 client over hyper, plain HTTP only (no TLS): [`Target`] (a parsed
//! `http://host[:port]/path`, also used to validate `alerts.webhook.url`), [`post_json`] for the
//! webhook notifications and [`get`] for `outbox-relay status` and `apply status` (which read
//! the running process's `/status.json`). Shared by both programs; it depends on nothing else
//! here, so a configuration can use [`Target::parse`] to check a URL.

use std::{net::SocketAddr, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{
    Method, Request, StatusCode, Uri,
    header::{AUTHORIZATION, CONTENT_TYPE, HOST, USER_AGENT},
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where an HTTP request goes: a parsed `http://host[:port]/path` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    host: String,
    port: u16,
    authority: String,
    path: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl Target {
    /// Accepts `http://host[:port][/path][?query]`; explains anything else.
    pub fn parse(url: &str) -> Result<Target, String> {
        let uri: Uri = url
            .parse()
            .map_err(|_| "not a URL: use http://host[:port]/path".to_string())?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err("https is not supported (no TLS yet): use http://, e.g. \
                            Alertmanager on the local network or a local HTTPS forwarder"
                    .into());
            }
            _ => return Err("not a URL: use http://host[:port]/path".into()),
        }
        let authority = uri
            .authority()
            .ok_or("the URL has no host: use http://host[:port]/path")?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return Err("the URL has no host: use http://host[:port]/path".into());
        }
        if authority.as_str().contains('@') {
            return Err("user:password@ in the URL is not supported: use \
                        alerts.webhook.authorization"
                .into());
        }
        Ok(Target {
            port: authority.port_u16().unwrap_or(80),
            authority: authority.as_str().to_string(),
            host,
            path: uri
                .path_and_query()
                .map_or("/".to_string(), |p| p.as_str().to_string()),
        })
    }

    /// The relay's own endpoint at `addr` (for `status`).
    pub fn local(addr: SocketAddr, path: &str) -> Target {
        let ip = if addr.ip().is_unspecified() {
            match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            }
        } else {
            addr.ip()
        };
        let addr = SocketAddr::new(ip, addr.port());
        Target {
            host: ip.to_string(),
            port: addr.port(),
            authority: addr.to_string(),
            path: path.to_string(),
        }
    }

    /// Scheme, host and port only: the path may hold a token.
    pub fn redacted(&self) -> String {
        format!("http://{}", self.authority)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot connect: {0}")]
    Connect(#[source] std::io::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("HTTP error: {0}")]
    Protocol(#[from] hyper::Error),
    #[error("cannot build the request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("the server answered {status}: {body}")]
    Status { status: StatusCode, body: String },
}

/// POSTs a JSON body; any 2xx is success.
pub async fn post_json(
    target: &Target,
    body: String,
    authorization: Option<&str>,
    timeout: Duration,
) -> Result<(), HttpError> {
    let (status, resp) = request(target, Method::POST, Some(body), authorization, timeout).await?;
    if status.is_success() {
        Ok(())
    } else {
        Err(HttpError::Status {
            status,
            body: String::from_utf8_lossy(&resp[..resp.len().min(200)]).into_owned(),
        })
    }
}

/// GETs `target`; returns the status and the body.
pub async fn get(target: &Target, timeout: Duration) -> Result<(StatusCode, String), HttpError> {
    let (status, body) = request(target, Method::GET, None, None, timeout).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

async fn request(
    target: &Target,
    method: Method,
    json_body: Option<String>,
    authorization: Option<&str>,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), HttpError> {
    let exchange = async {
        let stream = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(HttpError::Connect)?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let conn = tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(target.path.as_str())
            .header(HOST, target.authority.as_str())
            .header(
                USER_AGENT,
                concat!("outbox-relay/", env!("CARGO_PKG_VERSION")),
            );
        if json_body.is_some() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        if let Some(a) = authorization {
            req = req.header(AUTHORIZATION, a);
        }
        let req = req.body(Full::new(Bytes::from(json_body.unwrap_or_default())))?;
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        conn.abort();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| HttpError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn webhook_urls_are_plain_http_with_host_and_optional_port() {
        let t = Target::parse("http://am.example:9093/api/v2/alerts?x=1").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("am.example", 9093));
        assert_eq!(t.path, "/api/v2/alerts?x=1");
        assert_eq!(t.redacted(), "http://am.example:9093");
        let t = Target::parse("http://hooks.local/services/T0/B0/SECRET").unwrap();
        assert_eq!(
            (t.port, t.redacted()),
            (80, "http://hooks.local".to_string())
        );
        assert!(!format!("{t:?}").contains("SECRET"));
        let t = Target::parse("http://[::1]:8080").unwrap();
        assert_eq!((t.host.as_str(), t.path.as_str()), ("::1", "/"));
        for bad in [
            "https://hooks.slack.com/x",
            "ftp://x/",
            "hooks.local:80",
            "",
            "http://u:p@h/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        assert!(Target::parse("https://x/").unwrap_err().contains("no TLS"));
    }

    #[test]
    fn local_targets_replace_unspecified_addresses_with_loopback() {
        let t = Target::local("0.0.0.0:9559".parse().unwrap(), "/metrics");
        assert_eq!(t.redacted(), "http://127.0.0.1:9559");
    }

    #[tokio::test]
    async fn client_posts_json_and_reports_refused_connections() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !String::from_utf8_lossy(&buf).contains("{\"a\":1}") {
                let n = s.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&chunk[..n]);
            }
            s.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8(buf).unwrap()
        });
        let t = Target::parse(&format!("http://{addr}/hook")).unwrap();
        post_json(
            &t,
            "{\"a\":1}".into(),
            Some("Bearer x"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let req = server.await.unwrap();
        assert!(req.starts_with("POST /hook HTTP/1.1\r\n"), "{req}");
        assert!(
            req.to_ascii_lowercase()
                .contains("content-type: application/json")
        );
        assert!(req.to_ascii_lowercase().contains("authorization: bearer x"));

        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead = closed.local_addr().unwrap();
        drop(closed);
        let e = post_json(
            &Target::local(dead, "/"),
            "{}".into(),
            None,
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, HttpError::Connect(_)), "{e}");
    }
}
