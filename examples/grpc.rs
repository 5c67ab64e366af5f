//! A tonic gRPC server (the standard `grpc.health.v1.Health` service) behind `RateLimitLayer`:
//! the layer works on any tower service, and here the endpoint is the gRPC method path.
//!
//! ```text
//! cargo run --example grpc            # serves until killed
//! cargo run --example grpc -- --demo  # then calls itself 4 times as user "alice" and exits
//! cargo run --example grpc -- --help
//! ```
//!
//! It serves on a free port of 127.0.0.1 and, once it accepts connections, prints one line,
//! `listening on ADDR`, to stdout. Limits: 3 calls per user, 10 per method and 100 in all, per
//! 60 s window.
//!
//! - **Endpoint:** the gRPC method path, `/grpc.health.v1.Health/Check` (the HTTP/2 `:path` of
//!   the call), but only for methods this server has: any other path is counted under the
//!   layer's one fixed "unmatched" key, so a client cannot make a key per path.
//! - **User:** the `x-user-id` metadata (gRPC metadata are HTTP/2 headers). Without it the user
//!   tier is skipped for that call: tonic does not provide axum's `ConnectInfo`, so the layer
//!   has no client IP to fall back on.
//!
//! **What a denied call looks like to the client.** The layer answers a denied call, without
//! calling the service, with a plain HTTP `429 Too Many Requests`, `Retry-After`,
//! `X-RateLimit-Remaining: 0` and an `application/problem+json` body. Served like that
//! (`Server::builder().layer(rate_limit_layer)` alone), a tonic 0.14 client reads that body as a
//! gRPC frame and fails with `Code::Internal`, "protocol error: received message with invalid
//! compression flag: 123 (valid flags are 0 and 1) while receiving response with status: 429
//! Too Many Requests" (123 is the `{` that opens the JSON). Not `Unavailable`: tonic maps a 429
//! to `Unavailable` (the gRPC HTTP-to-status mapping) only when the body is empty. A unary
//! call's `Status::metadata()` does hold the 429's headers (`retry-after`,
//! `x-ratelimit-remaining`: tonic merges the response headers into it), but a server-streaming
//! call (`Watch`) returns `Ok` and fails only at its first `message()`, with the same code and
//! no metadata. `tests/grpc.rs` pins all of this down.
//!
//! So this example adds [`resource_exhausted`] in front: it rewrites the layer's 429 into a
//! gRPC "trailers-only" response, HTTP 200 with `grpc-status: 8` in a HEADERS frame that ends
//! the stream. The client then gets `Code::ResourceExhausted` (the code gRPC uses for rate
//! limiting) from the call itself, streaming or not, with "rate limit reached; retry after N s"
//! and `retry-after` and `x-ratelimit-remaining` in `Status::metadata()`; allowed calls carry
//! `x-ratelimit-remaining` (and `retry-after: 0`) in their response metadata.

use std::time::Duration;

use clap::Parser;
use http::header::RETRY_AFTER;
use http::StatusCode;
use tiered_ratelimit::{RateLimitConfig, RateLimitLayer, ResponseBody};
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::util::MapResponseLayer;

/// The method paths this server has: each one is an endpoint key; any other path is not.
const METHODS: [&str; 2] = [
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
];

/// The endpoint of a call: its gRPC method path, if the server has that method.
fn grpc_method(path: &str) -> Option<String> {
    METHODS.contains(&path).then(|| path.to_owned())
}

/// Rewrites the rate limit layer's plain-HTTP 429 into a gRPC `RESOURCE_EXHAUSTED` status, and
/// gives every response tonic's own body type (one type for both kinds of response).
///
/// Tonic 0.14's `Server::layer` would accept the layer's `ResponseBody<tonic::body::Body>` as it
/// is (any `http_body::Body<Data = Bytes>` whose error converts into a boxed error), so this is
/// not needed for tonic to compile or serve: it exists for the status. A gRPC client expects
/// HTTP 200 with the status in `grpc-status`; the layer's 429 carries no `grpc-status`, so the
/// client would make a status of its own from the body (see the module docs). The inner gRPC
/// service never answers 429 itself (gRPC errors travel as HTTP 200 with `grpc-status`), so a
/// 429 here is always the layer's rejection.
pub fn resource_exhausted(
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
    // The 429's headers become the status's metadata (`retry-after`, `x-ratelimit-remaining`);
    // `into_http` drops its `content-type: text/plain` for `application/grpc` and answers with
    // a trailers-only response: HTTP 200, `grpc-status: 8`, `grpc-message`, no body.
    Status::with_metadata(
        Code::ResourceExhausted,
        message,
        MetadataMap::from_headers(parts.headers),
    )
    .into_http()
}

/// A tonic gRPC server (grpc.health.v1.Health) behind tiered-ratelimit's `RateLimitLayer`:
/// 3 calls per user (`x-user-id` metadata), 10 per method and 100 in all, per 60 s window.
///
/// It serves on a free port of 127.0.0.1 and prints `listening on ADDR` once it accepts
/// connections; a denied call gets `RESOURCE_EXHAUSTED` with `retry-after` in its metadata.
#[derive(Debug, Parser)]
#[command(name = "grpc", version)]
struct Cli {
    /// Call the server 4 times as user "alice", print each answer, and exit
    #[arg(long)]
    demo: bool,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Cli { demo } = Cli::parse();

    let config = RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(3)
        .endpoint_limit(10)
        .global_limit(100)
        .build()?;
    let rate_limit = RateLimitLayer::new(config)
        .endpoint(|parts| grpc_method(parts.uri.path()))
        .user_id_header("x-user-id");

    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = Server::builder()
        // The first layer added is the outermost: it sees the rate limiter's responses.
        .layer(MapResponseLayer::new(resource_exhausted))
        .layer(rate_limit)
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    println!("listening on {addr}");

    if !demo {
        server.await?;
        return Ok(());
    }
    let server = tokio::spawn(server);
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = HealthClient::new(channel);
    for call in 1..=4 {
        let mut request = tonic::Request::new(HealthCheckRequest::default());
        request
            .metadata_mut()
            .insert("x-user-id", "alice".parse().expect("valid metadata"));
        match client.check(request).await {
            Ok(response) => println!(
                "call {call}: {:?}, x-ratelimit-remaining: {:?}",
                response.get_ref().status(),
                response.metadata().get("x-ratelimit-remaining"),
            ),
            Err(status) => println!(
                "call {call}: {:?} {:?}, retry-after: {:?}, x-ratelimit-remaining: {:?}",
                status.code(),
                status.message(),
                status.metadata().get("retry-after"),
                status.metadata().get("x-ratelimit-remaining"),
            ),
        }
    }
    server.abort();
    Ok(())
}
