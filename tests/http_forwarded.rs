//! The client's address behind proxies, end to end: which entry of `X-Forwarded-For` or
//! `Forwarded` counts as the user, over real HTTP (`trusted_proxies`, `trusted_hops`).
#![cfg(feature = "axum")]

mod common;

use common::http::{config, items_router, serve};
use http::StatusCode;
use tiered_ratelimit::RateLimitLayer;

async fn get_forwarded(
    client: &reqwest::Client,
    url: &str,
    header: &str,
    value: &str,
) -> StatusCode {
    client
        .get(url)
        .header(header, value)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn behind_trusted_proxies_the_rightmost_untrusted_address_is_the_client() {
    let layer = RateLimitLayer::new(config(1, 0, 0)).trusted_proxies([
        "127.0.0.0/8".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    ]);
    let base = serve(items_router().route_layer(layer), true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    let xff = "x-forwarded-for";
    // The client spoofs the leftmost entry; the proxies appended 198.51.100.4 and 10.0.0.2.
    assert_eq!(
        get_forwarded(&client, &url, xff, "6.6.6.6, 198.51.100.4, 10.0.0.2").await,
        StatusCode::OK
    );
    // Another spoofed leftmost entry does not make another client.
    assert_eq!(
        get_forwarded(&client, &url, xff, "7.7.7.7, 198.51.100.4, 10.0.0.2").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // A different real client does.
    assert_eq!(
        get_forwarded(&client, &url, xff, "198.51.100.5").await,
        StatusCode::OK
    );
    // RFC 7239 Forwarded is not read unless named.
    let fwd = "forwarded";
    assert_eq!(
        get_forwarded(&client, &url, fwd, "for=203.0.113.77").await,
        StatusCode::OK,
        "the peer 127.0.0.1 is the client"
    );
    assert_eq!(
        get_forwarded(&client, &url, fwd, "for=203.0.113.78").await,
        StatusCode::TOO_MANY_REQUESTS,
        "the peer again, whatever Forwarded says"
    );
    // The same layer reading Forwarded, with an IPv6 client and a port.
    let layer = RateLimitLayer::new(config(1, 0, 0))
        .trusted_proxies(["127.0.0.0/8".parse().unwrap()])
        .client_ip_header(http::header::FORWARDED);
    let base = serve(items_router().route_layer(layer), true).await;
    let forwarded_url = format!("{base}/api/v1/items");
    assert_eq!(
        get_forwarded(
            &client,
            &forwarded_url,
            fwd,
            "for=\"[2001:db8:1:2::a]:4711\""
        )
        .await,
        StatusCode::OK
    );
    // Same /64: the same client.
    assert_eq!(
        get_forwarded(&client, &forwarded_url, fwd, "for=\"[2001:db8:1:2::b]\"").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // IPv4-mapped addresses are IPv4: two of them are two clients, not one ::ffff:0:0/64.
    assert_eq!(
        get_forwarded(&client, &url, xff, "::ffff:192.0.2.1").await,
        StatusCode::OK
    );
    assert_eq!(
        get_forwarded(&client, &url, xff, "::ffff:192.0.2.2").await,
        StatusCode::OK
    );
    assert_eq!(
        get_forwarded(&client, &url, xff, "192.0.2.1").await,
        StatusCode::TOO_MANY_REQUESTS,
        "::ffff:192.0.2.1 is 192.0.2.1"
    );
}

/// The hardening issue's repro: behind a proxy on 127.0.0.1 that appends `X-Forwarded-For`,
/// a client that sends `Forwarded: for=6.6.6.N` itself cannot pick its own bucket.
#[tokio::test]
async fn a_client_cannot_pick_its_bucket_through_a_header_the_proxy_does_not_write() {
    let layer =
        RateLimitLayer::new(config(2, 0, 0)).trusted_proxies(["127.0.0.1/32".parse().unwrap()]);
    let base = serve(items_router().route_layer(layer), true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    let mut passed = 0;
    for n in 0..6 {
        let status = client
            .get(&url)
            .header("x-forwarded-for", "10.9.9.8")
            .header("forwarded", format!("for=6.6.6.{n}"))
            .send()
            .await
            .unwrap()
            .status();
        passed += usize::from(status == StatusCode::OK);
    }
    assert_eq!(passed, 2, "keyed by the proxy's X-Forwarded-For only");

    // Named X-Real-IP: only it counts.
    let layer = RateLimitLayer::new(config(1, 0, 0))
        .trusted_proxies(["127.0.0.1/32".parse().unwrap()])
        .client_ip_header(http::HeaderName::from_static("x-real-ip"));
    let base = serve(items_router().route_layer(layer), true).await;
    let url = format!("{base}/api/v1/items");
    let get = |real: &'static str, xff: &'static str| {
        client
            .get(&url)
            .header("x-real-ip", real)
            .header("x-forwarded-for", xff)
            .send()
    };
    assert_eq!(
        get("198.51.100.1", "6.6.6.1").await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        get("198.51.100.1", "6.6.6.2").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get("198.51.100.2", "6.6.6.2").await.unwrap().status(),
        StatusCode::OK
    );
}

/// An outside review's bypass: a client puts a byte that is not UTF-8 in its own part of
/// `X-Forwarded-For` (or `Forwarded`); the proxy appends the real address on the same line.
/// The entries the proxies wrote are still read, so each client keeps its own bucket instead
/// of every such request being counted under the proxy's address.
#[tokio::test]
async fn a_non_utf8_entry_written_by_the_client_does_not_hide_what_the_proxy_appended() {
    let layer = RateLimitLayer::new(config(1, 0, 0)).trusted_proxies([
        "127.0.0.0/8".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    ]);
    let base = serve(items_router().route_layer(layer), true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    let get = |header: &'static str, value: &'static [u8]| {
        client
            .get(&url)
            .header(header, http::HeaderValue::from_bytes(value).unwrap())
            .send()
    };
    let xff = "x-forwarded-for";
    let status = |r: reqwest::Result<reqwest::Response>| r.unwrap().status();
    assert_eq!(
        status(get(xff, b"\xff, 198.51.100.4, 10.0.0.2").await),
        StatusCode::OK
    );
    assert_eq!(
        status(get(xff, b"\xfe\xfe, 198.51.100.5, 10.0.0.2").await),
        StatusCode::OK,
        "another client, not the proxy's bucket"
    );
    assert_eq!(
        status(get(xff, b"6.6.6.6, 198.51.100.4").await),
        StatusCode::TOO_MANY_REQUESTS,
        "the first client again, however it fills its own part"
    );
    // Forwarded, named: the same.
    let layer = RateLimitLayer::new(config(1, 0, 0))
        .trusted_proxies(["127.0.0.0/8".parse().unwrap()])
        .client_ip_header(http::header::FORWARDED);
    let base = serve(items_router().route_layer(layer), true).await;
    let url = format!("{base}/api/v1/items");
    let get = |value: &'static [u8]| {
        client
            .get(&url)
            .header("forwarded", http::HeaderValue::from_bytes(value).unwrap())
            .send()
    };
    assert_eq!(
        status(get(b"for=\xff;by=x, for=198.51.100.4").await),
        StatusCode::OK
    );
    assert_eq!(
        status(get(b"for=6.6.6.6;x=\xff, for=198.51.100.5").await),
        StatusCode::OK
    );
    assert_eq!(
        status(get(b"for=198.51.100.4").await),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// An outside audit's bypass, through real requests: behind a proxy that appends to the
/// client's `Forwarded` line (`$http_forwarded, for=$remote_addr`), a client that opened a
/// quote and never closed it (`x="`) had the proxy's element swallowed and was counted under
/// the proxy's address: a second bucket for a client at its limit, taken from every request
/// whose chain cannot be read. It keeps its own, and the proxy's stays free.
#[tokio::test]
async fn a_quote_the_client_leaves_open_does_not_hide_what_the_proxy_appended() {
    let layer = RateLimitLayer::new(config(1, 0, 0))
        .trusted_proxies(["127.0.0.0/8".parse().unwrap()])
        .client_ip_header(http::header::FORWARDED);
    let base = serve(items_router().route_layer(layer), true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    let forwarded = |value: &'static str| get_forwarded(&client, &url, "forwarded", value);
    assert_eq!(forwarded("for=198.51.100.4").await, StatusCode::OK);
    assert_eq!(
        forwarded("x=\", for=198.51.100.4").await,
        StatusCode::TOO_MANY_REQUESTS,
        "the same client, at its limit"
    );
    assert_eq!(
        forwarded("x=\", for=198.51.100.5").await,
        StatusCode::OK,
        "another client, in its own bucket"
    );
    let no_header = client.get(&url).send().await.unwrap().status();
    assert_eq!(
        no_header,
        StatusCode::OK,
        "the proxy's own bucket is untouched"
    );
}

#[tokio::test]
async fn forwarded_headers_from_an_untrusted_peer_are_ignored() {
    // Only 10.0.0.0/8 is trusted; the peer is 127.0.0.1, so it is the client whatever it says.
    let layer =
        RateLimitLayer::new(config(1, 0, 0)).trusted_proxies(["10.0.0.0/8".parse().unwrap()]);
    let base = serve(items_router().route_layer(layer), true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    assert_eq!(
        get_forwarded(&client, &url, "x-forwarded-for", "198.51.100.4").await,
        StatusCode::OK
    );
    assert_eq!(
        get_forwarded(&client, &url, "x-forwarded-for", "198.51.100.5").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn hop_count_picks_the_address_the_first_proxy_appended() {
    let layer = RateLimitLayer::new(config(1, 0, 0)).trusted_hops(2);
    let base = serve(items_router().route_layer(layer), true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    let xff = "x-forwarded-for";
    assert_eq!(
        get_forwarded(&client, &url, xff, "6.6.6.6, 198.51.100.4, 10.0.0.2").await,
        StatusCode::OK
    );
    assert_eq!(
        get_forwarded(&client, &url, xff, "1.2.3.4, 198.51.100.4, 10.0.0.9").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get_forwarded(&client, &url, xff, "6.6.6.6, 198.51.100.7, 10.0.0.2").await,
        StatusCode::OK
    );
}
