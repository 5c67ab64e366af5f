//! [`RouteKeys`]: the endpoint key parts of routes that cannot stand as they are, encoded once.
//!
//! A route template with a parameter (`/items/{id}`) holds `{` and `}`, which a key part
//! percent-encodes (they are Redis Cluster hash tags): an allocation and a copy on every check
//! of that route, about a third of the whole memory check. Routes are few, so each one's key
//! part is kept here the first time and borrowed after. A route that is safe as it is never
//! comes here.
//!
//! Reading takes no lock and writes nothing shared (an `arc_swap` load), so checks of one hot
//! route on many cores do not contend. Adding a route copies the map: routes are added a few
//! times in a process's life. At most [`MAX_ROUTES`] routes of at most
//! [`MAX_RAW_ID_LEN`] bytes each are kept (under 300 KB in all), so callers that name endpoints
//! themselves (a custom `endpoint` closure, `RateLimiter::check`) cannot grow it without bound;
//! any other route is encoded on each check, after a lookup that misses.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use crate::key::{encode_id, is_plain, MAX_RAW_ID_LEN};

/// The most routes whose key parts are kept.
pub(crate) const MAX_ROUTES: usize = 1024;

type Map = HashMap<Box<str>, Box<str>, ahash::RandomState>;

/// Routes' encoded key parts, shared by every check of one limiter.
#[derive(Default)]
pub(crate) struct RouteKeys {
    map: ArcSwap<Map>,
}

/// What a check holds while it borrows a kept key part.
pub(crate) type Held = Guard<Arc<Map>>;

impl RouteKeys {
    /// The key part of `route`: the route itself when it is safe as it is, else its encoding,
    /// kept in `held` (which the caller keeps alive as long as it uses the answer).
    #[inline]
    pub(crate) fn key_of<'a>(&self, route: &'a str, held: &'a mut Option<Held>) -> Cow<'a, str> {
        if is_plain(route) {
            return Cow::Borrowed(route);
        }
        self.kept(route, held)
    }

    /// Out of line, so that the check of a safe route stays as small as it was.
    #[inline(never)]
    fn kept<'a>(&self, route: &str, held: &'a mut Option<Held>) -> Cow<'a, str> {
        let map: &'a Held = held.insert(self.map.load());
        if let Some(key) = map.get(route) {
            return Cow::Borrowed(key);
        }
        let encoded = encode_id(route).into_owned();
        // Only routes of an id's length are kept: a kept route is its raw text too, and a
        // long one (a raw path, say) would make the map, and each copy of it, that large.
        if map.len() < MAX_ROUTES && route.len() <= MAX_RAW_ID_LEN {
            self.map.rcu(|map| {
                if map.len() >= MAX_ROUTES || map.contains_key(route) {
                    return Arc::clone(map);
                }
                let mut map = Map::clone(map);
                map.insert(Box::from(route), Box::from(encoded.as_str()));
                Arc::new(map)
            });
        }
        Cow::Owned(encoded)
    }

    /// How many routes are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.load().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_safe_route_is_borrowed_and_not_kept() {
        let keys = RouteKeys::default();
        let mut held = None;
        assert!(matches!(
            keys.key_of("/api/v1/items", &mut held),
            Cow::Borrowed("/api/v1/items")
        ));
        assert!(held.is_none());
        assert_eq!(keys.len(), 0);
    }

    #[test]
    fn a_route_with_a_parameter_is_encoded_once_then_borrowed() {
        let keys = RouteKeys::default();
        let mut held = None;
        let first = keys.key_of("/items/{id}", &mut held).into_owned();
        assert_eq!(first, encode_id("/items/{id}"));
        assert_eq!(keys.len(), 1);
        let mut held = None;
        let again = keys.key_of("/items/{id}", &mut held);
        assert!(matches!(again, Cow::Borrowed(_)));
        assert_eq!(again, first);
    }

    #[test]
    fn a_long_route_is_encoded_but_not_kept() {
        let keys = RouteKeys::default();
        let long = format!("/{}/{{id}}", "x".repeat(MAX_RAW_ID_LEN));
        let mut held = None;
        assert_eq!(keys.key_of(&long, &mut held), encode_id(&long));
        assert_eq!(keys.len(), 0);
    }

    #[test]
    fn a_flood_of_distinct_routes_keeps_at_most_the_cap_and_encodes_the_rest() {
        let keys = RouteKeys::default();
        for i in 0..MAX_ROUTES + 500 {
            let route = format!("/r/{{p{i}}}");
            let mut held = None;
            assert_eq!(keys.key_of(&route, &mut held), encode_id(&route));
        }
        assert_eq!(keys.len(), MAX_ROUTES);
        let late = format!("/r/{{p{}}}", MAX_ROUTES + 1);
        let mut held = None;
        assert_eq!(keys.key_of(&late, &mut held), encode_id(&late));
    }
}
