//! The layer on a tonic gRPC server (`grpc.health.v1.Health`), served on real TCP listeners and
//! called by a real tonic client over a `Channel`: the endpoint is the gRPC method path, the
//! user is the `x-user-id` metadata, and a denied call is pinned down as the client sees it,
//! both with the layer alone and with the `RESOURCE_EXHAUSTED` adapter of `examples/grpc.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;
use http_body::Body as _;
use tiered_ratelimit::store::MemoryStore;
use tiered_ratelimit::{
    ManualClock, RateLimitConfig, RateLimitLayer, RateLimiter, ResponseBody, Tier,
};
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::util::MapResponseLayer;
use tower::ServiceExt;

const CHECK: &str = "/grpc.health.v1.Health/Check";
const WATCH: &str = "/grpc.health.v1.Health/Watch";
const MINUTE: Duration = Duration::from_secs(60);

fn config(user: u64, endpoint: u64, global: u64) -> RateLimitConfig {
    RateLimitConfig::builder()
        .window(MINUTE)
        .user_limit(user)
        .endpoint_limit(endpoint)
        .global_limit(global)
        .build()
        .unwrap()
}

/// A layer on a limiter over `store`, keyed as in `examples/grpc.rs`. Its clock stands still,
/// so `Retry-After` on a full window is exactly 61 (see the README).
fn layer(config: RateLimitConfig, store: &MemoryStore) -> RateLimitLayer {
    let limiter = RateLimiter::builder(config)
        .memory_store(store.clone())
        .clock(ManualClock::new())
        .build();
    RateLimitLayer::from_limiter(limiter)
        .endpoint(|parts| grpc_method(parts.uri.path()))
        .user_id_header("x-user-id")
}

/// As in `examples/grpc.rs`: the method path, for the methods the server has.
fn grpc_method(path: &str) -> Option<String> {
    [CHECK, WATCH].contains(&path).then(|| path.to_owned())
}

/// As in `examples/grpc.rs`: the layer's 429 as a gRPC `RESOURCE_EXHAUSTED` status.
fn resource_exhausted(
    response: http::Response<ResponseBody<tonic::body::Body>>,
) -> http::Response<tonic::body::Body> {
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return response.map(tonic::body::Body::new);
    }
    let (parts, _text) = response.into_parts();
    let retry_after = parts
        .headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("1");
    let message = format!("rate limit reached; retry after {retry_after} s");
    Status::with_metadata(
        Code::ResourceExhausted,
        message,
        MetadataMap::from_headers(parts.headers),
    )
    .into_http()
}

/// One metadata value, as text.
fn meta<'a>(metadata: &'a MetadataMap, key: &str) -> Option<&'a str> {
    metadata.get(key)?.to_str().ok()
}

async fn listen() -> (TcpIncoming, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (TcpIncoming::from(listener), addr)
}

async fn connect(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The health service behind the layer alone: denied calls are the layer's plain HTTP 429.
async fn serve_raw(layer: RateLimitLayer) -> Channel {
    let (incoming, addr) = listen().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = Server::builder()
        .layer(layer)
        .add_service(health)
        .serve_with_incoming(incoming);
    tokio::spawn(server);
    connect(addr).await
}

/// The health service behind the layer and the `RESOURCE_EXHAUSTED` adapter.
async fn serve_grpc_status(layer: RateLimitLayer) -> Channel {
    let (incoming, addr) = listen().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = Server::builder()
        .layer(MapResponseLayer::new(resource_exhausted))
        .layer(layer)
        .add_service(health)
        .serve_with_incoming(incoming);
    tokio::spawn(server);
    connect(addr).await
}

fn request(user: Option<&str>) -> tonic::Request<HealthCheckRequest> {
    let mut request = tonic::Request::new(HealthCheckRequest::default());
    if let Some(user) = user {
        request
            .metadata_mut()
            .insert("x-user-id", user.parse().unwrap());
    }
    request
}

async fn check(client: &mut HealthClient<Channel>, user: Option<&str>) -> Result<(), Status> {
    let response = client.check(request(user)).await?;
    assert_eq!(response.get_ref().status(), ServingStatus::Serving);
    Ok(())
}

/// A `Watch` call up to its first message (the current status).
async fn watch(client: &mut HealthClient<Channel>, user: Option<&str>) -> Result<(), Status> {
    let mut stream = client.watch(request(user)).await?.into_inner();
    let first = stream.message().await?.expect("a first status");
    assert_eq!(first.status(), ServingStatus::Serving);
    Ok(())
}

/// A raw HTTP/2 gRPC request (no message) over the channel, as a tower service.
async fn raw_call(channel: &Channel, path: &str) -> http::Response<tonic::body::Body> {
    let request = http::Request::post(path)
        .header(CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::empty())
        .unwrap();
    channel.clone().oneshot(request).await.unwrap()
}

#[tokio::test]
async fn the_endpoint_is_the_grpc_method_path() {
    let store = MemoryStore::new();
    let channel = serve_raw(layer(config(0, 2, 0), &store)).await;
    let mut client = HealthClient::new(channel);

    check(&mut client, None).await.unwrap();
    check(&mut client, None).await.unwrap();
    assert!(check(&mut client, None).await.is_err());
    // The key is the method path as it is: `/`, `.` and letters need no encoding.
    assert_eq!(store.entries(Tier::Endpoint, CHECK), 2);

    // Another method of the same service has its own bucket.
    watch(&mut client, None).await.unwrap();
    watch(&mut client, None).await.unwrap();
    assert!(watch(&mut client, None).await.is_err());
    assert_eq!(store.entries(Tier::Endpoint, WATCH), 2);
    assert_eq!(store.entries(Tier::Endpoint, CHECK), 2);
    // No other endpoint key: no user tier (off), the global log is not an endpoint.
    assert_eq!(store.tracked_keys(), 2);
}

#[tokio::test]
async fn a_method_the_server_lacks_is_counted_under_one_fixed_key() {
    let store = MemoryStore::new();
    let channel = serve_raw(layer(config(0, 2, 0), &store)).await;

    for path in ["/grpc.health.v1.Health/Nope", "/no.Such/Service"] {
        let response = raw_call(&channel, path).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "12"); // UNIMPLEMENTED
        assert_eq!(store.entries(Tier::Endpoint, path), 0);
    }
    assert_eq!(store.entries(Tier::Endpoint, "@unmatched"), 2);
    // Unknown paths share that key, so the third is denied.
    let response = raw_call(&channel, "/a/third").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(store.tracked_keys(), 1);
}

#[tokio::test]
async fn the_user_is_the_x_user_id_metadata() {
    let store = MemoryStore::new();
    let channel = serve_raw(layer(config(1, 0, 0), &store)).await;
    let mut client = HealthClient::new(channel);

    check(&mut client, Some("alice")).await.unwrap();
    assert!(check(&mut client, Some("alice")).await.is_err());
    // The user tier spans methods: alice's Watch is denied too.
    assert!(watch(&mut client, Some("alice")).await.is_err());
    check(&mut client, Some("bob")).await.unwrap();
    assert_eq!(store.entries(Tier::User, "alice"), 1);
    assert_eq!(store.entries(Tier::User, "bob"), 1);
    // A UTF-8 id (sent as raw bytes, which HTTP/2 carries) is a user too, as over HTTP: an
    // outside review saw `josé` skip the user tier when the example read only visible ASCII.
    let utf8 = || {
        let mut request = tonic::Request::new(HealthCheckRequest::default());
        let value = tonic::metadata::MetadataValue::try_from("josé".as_bytes()).unwrap();
        request.metadata_mut().insert("x-user-id", value);
        request
    };
    client.check(utf8()).await.unwrap();
    assert!(
        client.check(utf8()).await.is_err(),
        "the second of a limit of 1"
    );
    let key = tiered_ratelimit::key::encode_id("josé");
    assert_eq!(store.entries(Tier::User, &key), 1);

    // Without the metadata the user tier is skipped: tonic gives the layer no client IP.
    for _ in 0..3 {
        check(&mut client, None).await.unwrap();
    }
    assert_eq!(store.tracked_keys(), 3);
}

#[tokio::test]
async fn the_global_limit_spans_methods_and_users() {
    let store = MemoryStore::new();
    let channel = serve_raw(layer(config(0, 0, 3), &store)).await;
    let mut client = HealthClient::new(channel);

    check(&mut client, Some("alice")).await.unwrap();
    watch(&mut client, Some("bob")).await.unwrap();
    check(&mut client, None).await.unwrap();
    assert!(watch(&mut client, Some("carol")).await.is_err());
    assert_eq!(store.entries(Tier::Global, ""), 3);
}

/// The layer alone: the client reads the 429's body as a gRPC frame. This pins down what
/// tonic 0.14 makes of it, which is why `examples/grpc.rs` adds the adapter.
#[tokio::test]
async fn without_the_adapter_a_denied_call_is_internal() {
    let store = MemoryStore::new();
    let channel = serve_raw(layer(config(0, 2, 0), &store)).await;
    let mut client = HealthClient::new(channel.clone());

    check(&mut client, None).await.unwrap();
    check(&mut client, None).await.unwrap();
    let status = check(&mut client, None).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    // The flag is the body's first byte: 123, the `{` of the problem+json.
    assert!(
        status
            .message()
            .starts_with("protocol error: received message with invalid compression flag: "),
        "{status:?}"
    );
    assert!(
        status
            .message()
            .ends_with("while receiving response with status: 429 Too Many Requests"),
        "{status:?}"
    );
    // A unary call's status carries the response headers as metadata, so the 429's are there.
    assert_eq!(meta(status.metadata(), "retry-after"), Some("61"));
    assert_eq!(meta(status.metadata(), "x-ratelimit-remaining"), Some("0"));
    assert!(status.metadata().get("grpc-status").is_none());

    // A server-streaming call returns Ok; the same error comes at its first message, and
    // there without the headers.
    let denied = {
        let store = MemoryStore::new();
        let channel = serve_raw(layer(config(0, 1, 0), &store)).await;
        let mut client = HealthClient::new(channel);
        watch(&mut client, None).await.unwrap();
        let mut stream = client.watch(request(None)).await.unwrap().into_inner();
        stream.message().await.unwrap_err()
    };
    assert_eq!(denied.code(), Code::Internal, "{denied:?}");
    assert!(
        denied.message().ends_with("429 Too Many Requests"),
        "{denied:?}"
    );
    assert!(denied.metadata().is_empty(), "{denied:?}");

    // On the wire, over the same HTTP/2 channel, it is the layer's plain 429.
    let response = raw_call(&channel, CHECK).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "61");
    assert_eq!(response.headers()["x-ratelimit-remaining"], "0");
    assert!(response.headers().get("grpc-status").is_none());
    assert_eq!(store.entries(Tier::Endpoint, CHECK), 2);
}

/// Tonic maps a 429 to `UNAVAILABLE` (the gRPC HTTP-to-status mapping) only when the body is
/// empty: with the layer's text body dropped, that is what the client gets.
#[tokio::test]
async fn an_empty_429_would_be_unavailable() {
    let store = MemoryStore::new();
    let (incoming, addr) = listen().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let drop_text = |response: http::Response<ResponseBody<tonic::body::Body>>| {
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            response.map(|_| tonic::body::Body::empty())
        } else {
            response.map(tonic::body::Body::new)
        }
    };
    let server = Server::builder()
        .layer(MapResponseLayer::new(drop_text))
        .layer(layer(config(0, 1, 0), &store))
        .add_service(health)
        .serve_with_incoming(incoming);
    tokio::spawn(server);
    let mut client = HealthClient::new(connect(addr).await);

    check(&mut client, None).await.unwrap();
    let status = check(&mut client, None).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.message(),
        "grpc-status header missing, mapped from HTTP status code 429"
    );
    assert_eq!(meta(status.metadata(), "retry-after"), Some("61"));
}

/// With the adapter: `RESOURCE_EXHAUSTED` from the call itself, the headers in its metadata.
#[tokio::test]
async fn with_the_adapter_a_denied_call_is_resource_exhausted_with_retry_after() {
    let store = MemoryStore::new();
    let channel = serve_grpc_status(layer(config(0, 2, 0), &store)).await;
    let mut client = HealthClient::new(channel.clone());

    for remaining in ["1", "0"] {
        let response = client.check(request(None)).await.unwrap();
        assert_eq!(response.get_ref().status(), ServingStatus::Serving);
        assert_eq!(
            meta(response.metadata(), "x-ratelimit-remaining"),
            Some(remaining)
        );
        assert_eq!(meta(response.metadata(), "retry-after"), Some("0"));
    }
    let status = client.check(request(None)).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "rate limit reached; retry after 61 s");
    assert_eq!(meta(status.metadata(), "retry-after"), Some("61"));
    assert_eq!(meta(status.metadata(), "x-ratelimit-remaining"), Some("0"));
    assert_eq!(
        meta(status.metadata(), "content-type"),
        Some("application/grpc")
    );
    assert_eq!(store.entries(Tier::Endpoint, CHECK), 2);

    // A server-streaming call is denied at the call, not at its first message.
    watch(&mut client, None).await.unwrap();
    watch(&mut client, None).await.unwrap();
    let status = client.watch(request(None)).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(meta(status.metadata(), "retry-after"), Some("61"));
    assert_eq!(store.entries(Tier::Endpoint, WATCH), 2);

    // On the wire: a gRPC trailers-only response, HTTP 200 whose HEADERS frame ends the stream.
    let response = raw_call(&channel, CHECK).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["grpc-status"], "8");
    assert_eq!(response.headers()[CONTENT_TYPE], "application/grpc");
    assert_eq!(response.headers()["retry-after"], "61");
    assert!(response.body().is_end_stream());
}
