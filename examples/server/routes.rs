//! The routes: the limited items API, `/health`, and `/rate-limit` (the caller's usage).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path};
use axum::http::request::Parts;
use axum::http::{HeaderName, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use tiered_ratelimit::{CheckRequest, IpNet, RateLimitLayer, RateLimiter, UserKey};

/// The routes the layer limits, as `/rate-limit` reports them.
const LIMITED_ROUTES: [&str; 2] = ["/api/v1/items", "/api/v1/items/{id}"];

/// `GET /rate-limit`: the caller's usage on each limited route, in the bucket the layer charges:
/// its user id (the `X-User-Id` header), else the client address as the layer finds it (behind
/// trusted proxies, the client they name; IPv6 grouped by /64). Records nothing.
async fn rate_limit(
    limiter: RateLimiter,
    layer: RateLimitLayer,
    peer: SocketAddr,
    parts: Parts,
) -> Result<Json<serde_json::Value>, (StatusCode, String)> {
    let id = layer.user_id_of(&parts);
    let ip = layer.client_ip(&parts.headers, peer.ip());
    let user = id.as_deref().map_or(UserKey::Ip(ip), UserKey::Id);
    let mut resources = serde_json::Map::new();
    for route in LIMITED_ROUTES {
        let usage = limiter
            .usage_request(CheckRequest::new(user, Some(route)))
            .await
            .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
        resources.insert(route.to_owned(), serde_json::json!(usage));
    }
    let caller = id.map_or_else(|| ip.to_string(), |id| id.into_owned());
    Ok(Json(
        serde_json::json!({ "user": caller, "resources": resources }),
    ))
}

pub(crate) fn app(
    limiter: RateLimiter,
    trusted_proxies: Vec<IpNet>,
    client_ip_header: Option<HeaderName>,
) -> Router {
    let usage = limiter.clone();
    let mut layer = RateLimitLayer::from_limiter(limiter)
        .user_id_header("x-user-id")
        .trusted_proxies(trusted_proxies);
    if let Some(name) = client_ip_header {
        layer = layer.client_ip_header(name);
    }
    let keys = layer.clone();
    let api = Router::new()
        .route("/api/v1/items", get(list_items).post(create_item))
        .route("/api/v1/items/{id}", get(get_item))
        // Answer axum's own body type: axum then has no body of ours to box again.
        .route_layer(layer.inner_body());
    let rate_limit = move |ConnectInfo(peer): ConnectInfo<SocketAddr>, parts: Parts| {
        let (limiter, layer) = (usage.clone(), keys.clone());
        async move { rate_limit(limiter, layer, peer, parts).await }
    };
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/rate-limit", get(rate_limit))
        .merge(api)
}

async fn list_items() -> Json<Vec<serde_json::Value>> {
    Json(vec![
        serde_json::json!({ "id": 1, "name": "apple" }),
        serde_json::json!({ "id": 2, "name": "pear" }),
    ])
}

async fn get_item(Path(id): Path<u64>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "id": id, "name": format!("item {id}") }))
}

async fn create_item(body: String) -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::CREATED,
        Json(serde_json::json!({ "created": true, "bytes": body.len() })),
    )
}
