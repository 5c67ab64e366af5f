//! Helpers of the tests that serve the layer over real HTTP (`tests/http*.rs`): a router, a
//! server on a free port, and requests as a user.

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::StatusCode;
use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};

pub const MINUTE: Duration = Duration::from_secs(60);

pub fn config(user: u64, endpoint: u64, global: u64) -> RateLimitConfig {
    RateLimitConfig::builder()
        .window(MINUTE)
        .user_limit(user)
        .endpoint_limit(endpoint)
        .global_limit(global)
        .build()
        .unwrap()
}

pub fn header_user_id(layer: RateLimitLayer) -> RateLimitLayer {
    layer.user_id(|parts| {
        parts
            .headers
            .get("x-user-id")?
            .to_str()
            .ok()
            .map(str::to_owned)
    })
}

pub fn items_router() -> Router {
    Router::new()
        .route(
            "/api/v1/items",
            get(|| async { "list" }).post(|| async { "created" }),
        )
        .route("/api/v1/items/{id}", get(|| async { "item" }))
}

/// Serves `app` on a free port, with `ConnectInfo<SocketAddr>` when `connect_info`.
pub async fn serve(app: Router, connect_info: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if connect_info {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap();
        } else {
            axum::serve(listener, app).await.unwrap();
        }
    });
    format!("http://{addr}")
}

pub struct Reply {
    pub status: StatusCode,
    pub remaining: Option<String>,
    pub retry_after: Option<String>,
    pub body: String,
}

pub async fn get_as(client: &reqwest::Client, url: &str, user: Option<&str>) -> Reply {
    send_as(client, http::Method::GET, url, user).await
}

pub async fn send_as(
    client: &reqwest::Client,
    method: http::Method,
    url: &str,
    user: Option<&str>,
) -> Reply {
    let mut req = client.request(method, url);
    if let Some(user) = user {
        req = req.header("x-user-id", user);
    }
    let resp = req.send().await.unwrap();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Reply {
        status: resp.status(),
        remaining: header("x-ratelimit-remaining"),
        retry_after: header("retry-after"),
        body: resp.text().await.unwrap(),
    }
}
