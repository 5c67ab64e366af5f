//! Route templates in a configuration that axum's `MatchedPath` can never name.
//!
//! axum 0.8 refuses a route that does not start with `/`, and a segment that starts with `:` or
//! `*` (0.7's parameters: 0.8 writes `{id}` and `{*rest}`), so the layer's default endpoint,
//! the matched route's template, is never one of these. A configuration naming one is still
//! accepted (a custom endpoint closure may name any string), and is warned about where a
//! limiter takes it.

use super::RateLimitConfig;

/// Why axum's `MatchedPath` never names `template`, if it never does.
pub(crate) fn never_matched(template: &str) -> Option<&'static str> {
    if !template.starts_with('/') {
        return Some("it does not start with `/`");
    }
    template
        .split('/')
        .any(|segment| segment.starts_with([':', '*']))
        .then_some("axum 0.8 writes a parameter as `{id}` (and a wildcard as `{*rest}`), not `:id`")
}

/// Logs a warning for each route of `config` that axum's `MatchedPath` never names: its limits
/// would never apply to a request counted under the matched route's template.
pub(crate) fn warn_never_matched(config: &RateLimitConfig) {
    for (template, _) in config.routes() {
        if let Some(why) = never_matched(template) {
            tracing::warn!(
                route = template,
                "routes.\"{template}\": no route of axum names this template ({why}), so its \
                 limits never apply under the layer's default endpoint (the matched route's \
                 template); ignore this if your own endpoint closure names it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_axum_never_names() {
        for template in [
            "/api/v1/items/:id",
            "api/v1/items",
            " ",
            "/files/*path",
            "login",
        ] {
            assert!(never_matched(template).is_some(), "{template}");
        }
        for template in [
            "/",
            "/api/v1/items/{id}",
            "/files/{*path}",
            "/v1/items:batchGet",
            "/helloworld.Greeter/SayHello",
        ] {
            assert_eq!(never_matched(template), None, "{template}");
        }
    }
}
