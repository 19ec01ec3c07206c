//! HTTP: the endpoint of the relay and of the applier (`/metrics`, `/healthz`, `/readyz`, and
//! the read-only console of [`crate::console`]: `/`, `/status.json`, `/history.json`), plain
//! HTTP over hyper; no TLS. The client used by webhooks and `status` is [`crate::http_client`].
//!
//! Invariants: `/healthz` answers 200 while the process serves requests; `/readyz` answers
//! 200 only when the process says it is ready ([`Readiness`]: for the relay, the stream is open
//! and no alert is critical), else 503 with one reason per line; `/readyz?role=any` also
//! answers 200 for a passive instance that waits for the slot another instance holds. A busy address never stops the relay: the endpoint logs
//! `http_listen_failed` and retries, because relaying matters more than being scraped.

use std::{convert::Infallible, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::Incoming,
    header::{
        CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HeaderValue, X_CONTENT_TYPE_OPTIONS,
    },
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{net::TcpListener, sync::watch};

use crate::events::{HTTP_ACCEPT_FAILED, HTTP_LISTEN_FAILED, HTTP_LISTENING};

/// What `/readyz` answers: `Ok` (200) or the reasons it is not ready (503, one per line).
pub trait Readiness: Send + Sync + 'static {
    /// `passive_ok`: the request asked `?role=any` (a passive instance counts as ready).
    fn readiness(&self, passive_ok: bool) -> Result<(), Vec<String>>;
}

/// The read-only pages served beside the probes (the console, [`crate::console`]).
pub trait Routes: Readiness {
    /// The paths, for the 404 text.
    const PATHS: &'static str;
    /// The answer to a GET of `path` (content type and body), if it is one of the routes.
    fn route(&self, path: &str, prom: &PrometheusHandle) -> Option<(&'static str, String)>;
}

/// Serves the endpoint on `listen` until `shutdown` flips to true.
pub async fn serve<R: Routes>(
    listen: std::net::SocketAddr,
    prom: PrometheusHandle,
    shared: Arc<R>,
    mut shutdown: watch::Receiver<bool>,
) {
    let listener = loop {
        match TcpListener::bind(listen).await {
            Ok(l) => break l,
            Err(e) => {
                tracing::error!(
                    addr = %listen, error = %e,
                    "{HTTP_LISTEN_FAILED}: /metrics, /healthz and /readyz are unavailable; \
                     retrying in 10 s (set http.listen to a free address)"
                );
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    };
    match listener.local_addr() {
        Ok(addr) => tracing::info!(addr = %addr, "{HTTP_LISTENING}"),
        Err(e) => tracing::warn!(error = %e, "{HTTP_LISTENING} (address unknown)"),
    }
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "{HTTP_ACCEPT_FAILED}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let prom = prom.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let r = respond(&req, &prom, shared.as_ref());
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn respond<R: Routes>(
    req: &Request<Incoming>,
    prom: &PrometheusHandle,
    shared: &R,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    };
    let path = req.uri().path();
    let known = matches!(path, "/metrics" | "/healthz" | "/readyz");
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
    }
    if !known {
        return match shared.route(path, prom) {
            Some((kind, body)) => {
                let mut r = text(StatusCode::OK, body);
                let h = r.headers_mut();
                h.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
                h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
                h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
                h.insert(
                    CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static(
                        "default-src 'none'; script-src 'self'; connect-src 'self'; \
                         style-src 'unsafe-inline'; img-src 'self' data:; \
                         frame-ancestors 'none'; form-action 'none'",
                    ),
                );
                r
            }
            None => text(
                StatusCode::NOT_FOUND,
                format!(
                    "not found: try /metrics, /healthz, /readyz or {}\n",
                    R::PATHS
                ),
            ),
        };
    }
    match path {
        "/metrics" => {
            let mut r = text(StatusCode::OK, prom.render());
            r.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        // `?role=any`: a passive instance waiting for the slot is ready too (Kubernetes).
        _ => match shared.readiness(req.uri().query() == Some("role=any")) {
            Ok(()) => text(StatusCode::OK, "ready\n".into()),
            Err(reasons) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready:\n{}\n", reasons.join("\n")),
            ),
        },
    }
}
