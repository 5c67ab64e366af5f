//! What the layer logs for the operator's two usual mistakes, in a test binary of its own (the
//! "once per process" warning keeps its state in a static): serving without `ConnectInfo`, and
//! trusting every address as a proxy.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tiered_ratelimit::{IpNet, RateLimitConfig, RateLimitLayer};
use tower::ServiceExt;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture() -> (Buffer, tracing::subscriber::DefaultGuard) {
    let logs = Buffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("tiered_ratelimit=warn")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

fn text(logs: &Buffer) -> String {
    String::from_utf8(logs.0.lock().unwrap().clone()).unwrap()
}

/// Without `ConnectInfo` (and without a user id) the user tier cannot apply: the requests go
/// through with no rate-limit header, and one warning (not one per request) names the fix.
#[tokio::test(flavor = "current_thread")]
async fn serving_without_connect_info_warns_once_and_sends_no_useless_header() {
    let (logs, _guard) = capture();
    let config = RateLimitConfig::builder().user_limit(1).build().unwrap();
    let svc = tower::service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(Full::new(bytes::Bytes::from_static(b"ok"))))
    });
    let svc = tower::Layer::layer(&RateLimitLayer::new(config), svc);
    for _ in 0..3 {
        let response = svc
            .clone()
            .oneshot(Request::new(String::new()))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("x-ratelimit-remaining").is_none());
        assert!(response.headers().get("retry-after").is_none());
    }
    let text = text(&logs);
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("into_make_service_with_connect_info"),
        "{text}"
    );
}

/// Trusting `0.0.0.0/0` lets every client name its own address: the layer says so, as an error.
#[test]
fn trusting_every_address_is_logged_as_an_error() {
    let (logs, _guard) = capture();
    let config = RateLimitConfig::builder().user_limit(5).build().unwrap();
    let _layer = RateLimitLayer::new(config.clone())
        .trusted_proxies(["10.0.0.0/8".parse::<IpNet>().unwrap()]);
    assert!(!text(&logs).contains("ERROR"), "{}", text(&logs));
    for everything in ["0.0.0.0/0", "::/0"] {
        let _layer = RateLimitLayer::new(config.clone())
            .trusted_proxies([everything.parse::<IpNet>().unwrap()]);
    }
    let text = text(&logs);
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 2, "{text}");
    assert!(
        errors.iter().all(|e| e.contains("trusts every client")),
        "{text}"
    );
}
