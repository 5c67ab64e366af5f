//! Route templates in a configuration that axum's `MatchedPath` can never name.
//!
//! axum 0.8 refuses a route that does not start with `/`, one its router (matchit 0.8) cannot
//! parse (an unclosed `{`, a wildcard before the end, ...), and, unless the router is built
//! `without_v07_checks()`, a segment that starts with `:` or `*` (0.7's parameters: 0.8 writes
//! `{id}` and `{*rest}`). So the layer's default endpoint, the matched route's template, is
//! never one of these. A configuration naming one is still accepted (a custom endpoint closure
//! may name any string), and is warned about where a limiter takes it.

use super::RateLimitConfig;

/// Why axum's `MatchedPath` never names `template` (or, for 0.7's syntax, names it only under
/// a router built `without_v07_checks()`), if so.
#[cfg(feature = "axum")]
pub(crate) fn never_matched(template: &str) -> Option<String> {
    if !template.starts_with('/') {
        return Some("axum refuses a route that does not start with `/`".to_owned());
    }
    if parameters(template) > MAX_PARAMETERS {
        return Some(format!(
            "axum's router refuses a route of more than {MAX_PARAMETERS} parameters"
        ));
    }
    // matchit parses a run of `{{` in quadratic time: a template longer than any route is
    // not given to it (a config file is the operator's, but a slow start is no answer).
    if template.len() <= MAX_PARSED_LEN {
        let parsed = std::panic::catch_unwind(|| matchit::Router::new().insert(template, ()));
        match parsed {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Some(format!("axum's router refuses it: {error}")),
            Err(_) => return Some("axum's router cannot take it (its parser panics)".to_owned()),
        }
    }
    template
        .split('/')
        .any(|segment| segment.starts_with([':', '*']))
        .then(|| {
            "axum 0.8 writes a parameter as `{id}` and a wildcard as `{*rest}`; it takes a \
             segment starting with `:` or `*` only from a router built `without_v07_checks()`, \
             and then matches it literally"
                .to_owned()
        })
}

/// The most parameters matchit 0.8 takes in one route: it panics ("Too many route
/// parameters") past them.
#[cfg(feature = "axum")]
const MAX_PARAMETERS: usize = 25;

/// Templates longer than this (bytes) are not given to matchit's parser.
#[cfg(feature = "axum")]
const MAX_PARSED_LEN: usize = 8 * 1024;

/// The parameters of `template` as matchit counts them: each `{` but an escaped `{{`.
#[cfg(feature = "axum")]
fn parameters(template: &str) -> usize {
    let mut count = 0;
    let mut bytes = template.bytes().peekable();
    while let Some(b) = bytes.next() {
        if b == b'{' {
            if bytes.peek() == Some(&b'{') {
                bytes.next();
            } else {
                count += 1;
            }
        }
    }
    count
}

/// Logs a warning for each route of `config` that axum's `MatchedPath` never names: its limits
/// would never apply to a request counted under the matched route's template. Once for each
/// limiter built and each reconfiguration, never per request.
pub(crate) fn warn_never_matched(config: &RateLimitConfig) {
    #[cfg(feature = "axum")]
    for (template, _) in config.routes() {
        if let Some(why) = never_matched(template) {
            tracing::warn!(
                route = template,
                "routes.\"{template}\": {why}. Under the layer's default endpoint (the matched \
                 route's template) its limits may never apply; ignore this if your own endpoint \
                 closure names it"
            );
        }
    }
    #[cfg(not(feature = "axum"))]
    let _ = config;
}

#[cfg(all(test, feature = "axum"))]
mod tests {
    use super::*;

    /// As axum 0.8.9 takes routes: each of these panics in `Router::route` (checked by a
    /// review with `catch_unwind`), or is taken only `without_v07_checks()`.
    #[test]
    fn templates_axum_never_names() {
        for template in [
            "/api/v1/items/:id",
            "api/v1/items",
            " ",
            "/files/*path",
            "login",
            "/files/{*rest}/more",
            "/x/{id",
            "/{}",
            "/a/}",
            "/{a}{b}",
            "/a/{*}",
        ] {
            assert!(never_matched(template).is_some(), "{template}");
        }
        for template in [
            "/",
            "/api/v1/items/{id}",
            "/files/{*path}",
            "/v1/items:batchGet",
            "/helloworld.Greeter/SayHello",
            "/a/{{literal}}",
        ] {
            assert_eq!(never_matched(template), None, "{template}");
        }
        let v07 = never_matched("/items/:id").unwrap();
        assert!(v07.contains("without_v07_checks"), "{v07}");
    }

    /// matchit panics past 25 parameters, and parses a run of `{{` in quadratic time: neither
    /// may take a limiter down or hold its start (a review: 26 parameters panicked `build`).
    #[test]
    fn a_hostile_template_is_warned_about_without_a_panic_or_a_long_parse() {
        let route = |n: usize| (0..n).map(|i| format!("/{{p{i}}}")).collect::<String>();
        assert_eq!(never_matched(&route(25)), None);
        let many = never_matched(&route(26)).unwrap();
        assert!(many.contains("more than 25 parameters"), "{many}");
        assert_eq!(parameters("/a/{{b}}/{c}"), 1);
        let started = std::time::Instant::now();
        let _ = never_matched(&format!("/{}", "{{".repeat(1 << 20)));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    /// Each template the test above says axum takes, axum takes.
    #[test]
    fn what_is_not_warned_about_axum_routes() {
        for template in [
            "/",
            "/api/v1/items/{id}",
            "/files/{*path}",
            "/v1/items:batchGet",
        ] {
            let _ = axum::Router::<()>::new().route(template, axum::routing::get(|| async {}));
        }
    }
}
