//! Accepting connections: plain HTTP or HTTPS (rustls, certificate and key from PEM files),
//! with deadlines a slow or silent client cannot stretch. `axum::serve` sets no timer, so a
//! client that sends half its headers, or nothing, kept a connection open for ever.

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// The deadlines of a connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// To send a request's headers, counted from the connection's start or the end of the
    /// previous response (so an idle keep-alive connection is closed too).
    pub header_read: Duration,
    /// To complete a TLS handshake.
    pub tls_handshake: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_read: Duration::from_secs(10),
            tls_handshake: Duration::from_secs(10),
        }
    }
}

/// A TLS acceptor from a PEM certificate chain and a PEM private key.
pub fn load_tls(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    use anyhow::Context;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read the certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad PEM in {}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("no certificate in {}", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read a private key from {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the certificate and key do not fit together")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` on `listener` (through `tls` when given) until `stopped` turns true, then lets
/// the requests in flight finish (at most 30 s).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    limits: ConnLimits,
    mut stopped: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let stop = async move {
        // An error means the server was dropped: stop as well.
        let _ = stopped.wait_for(|s| *s).await;
    };
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let service = TowerToHyperService::new(app.map_request(
                move |mut req: axum::http::Request<Incoming>| {
                    req.extensions_mut()
                        .insert(axum::extract::ConnectInfo::<SocketAddr>(peer));
                    req
                },
            ));
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_read);
            let result = match tls {
                None => {
                    watcher
                        .watch(http.serve_connection(TokioIo::new(stream), service))
                        .await
                }
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(limits.tls_handshake, acceptor.accept(stream))
                            .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    watcher
                        .watch(http.serve_connection(TokioIo::new(stream), service))
                        .await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(30), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after 30 s; stopping anyway");
    }
    Ok(())
}
