//! Siesta's web UI: the runs list (with actions on the runs ticked, or a bulk job over
//! every run its filter matches, and the job's progress), a run's page (lifecycle
//! explained, pending waits with their webhook URLs, a timeline waterfall, the raw
//! events) and the operator actions (restart from a step among them), as an axum
//! [`Router`] to merge beside the API.
//!
//! The UI is plain HTML, CSS and JavaScript compiled into the binary with
//! `include_str!`: nothing is fetched from the internet at run time (the
//! `Content-Security-Policy` says so to the browser too), and there is no JavaScript
//! toolchain to install. The page holds no data: it reads everything through the
//! public control API (`GET /runs`, `GET /runs/{id}`, `GET /runs/{id}/timeline`,
//! `GET /runs/actions/{id}`) and acts through it (a run's actions with `If-Match`;
//! `POST /runs/actions` for a filter), sending the API key the user gave it as the
//! bearer — so the UI sees exactly what the caller's tenant may see, and its asset
//! routes need no auth.
//!
//! Paths: `/` (the runs list), `/ui/runs/{id}` (a run's page), `/ui/builds` (the
//! builds and their unfinished runs), `/ui/flow` (concurrency limits with their keys'
//! holders and waiters, and schedules, paused, resumed and triggered from there) and
//! `/ui/*` for the assets. None of them is an API path, so merging cannot shadow the API.

use std::sync::LazyLock;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// The path of a run's page, for links printed by the CLI: `/ui/runs/{id}`.
pub fn run_page_path(run_id: &str) -> String {
    format!("/ui/runs/{run_id}")
}

/// A file of the UI, compiled in, with its entity tag.
struct Asset {
    body: &'static str,
    content_type: &'static str,
    /// A digest of the content: it changes exactly when the binary brings another file.
    etag: LazyLock<HeaderValue>,
}

/// A strong entity tag for `body`.
#[allow(clippy::expect_used, reason = "quoted hex is always a header value")]
fn etag_of(body: &str) -> HeaderValue {
    let digest = hex::encode(&Sha256::digest(body.as_bytes())[..12]);
    HeaderValue::from_str(&format!("\"{digest}\"")).expect("hex is a header value")
}

static INDEX_HTML: Asset = Asset {
    body: include_str!("../assets/index.html"),
    content_type: "text/html; charset=utf-8",
    etag: LazyLock::new(|| etag_of(INDEX_HTML.body)),
};
static APP_JS: Asset = Asset {
    body: include_str!("../assets/app.js"),
    content_type: "text/javascript; charset=utf-8",
    etag: LazyLock::new(|| etag_of(APP_JS.body)),
};
static APP_CSS: Asset = Asset {
    body: include_str!("../assets/app.css"),
    content_type: "text/css; charset=utf-8",
    etag: LazyLock::new(|| etag_of(APP_CSS.body)),
};
static FAVICON_SVG: Asset = Asset {
    body: include_str!("../assets/favicon.svg"),
    content_type: "image/svg+xml",
    etag: LazyLock::new(|| etag_of(FAVICON_SVG.body)),
};

/// Everything the page may load comes from this server; inline scripts are refused.
/// Inline style attributes are allowed: the waterfall places its bars with them.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
                   script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

/// The UI's routes. Merge them into the server's router:
/// `api_router.merge(siesta_ui::router())`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/runs/{id}", get(index))
        .route("/ui/builds", get(index))
        .route("/ui/flow", get(index))
        .route("/ui/app.js", get(|h: HeaderMap| asset(h, &APP_JS)))
        .route("/ui/app.css", get(|h: HeaderMap| asset(h, &APP_CSS)))
        .route(
            "/ui/favicon.svg",
            get(|h: HeaderMap| asset(h, &FAVICON_SVG)),
        )
}

async fn index(request: HeaderMap) -> Response {
    let mut response = asset(request, &INDEX_HTML).await;
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    response
}

/// Whether `If-None-Match` names `tag` (or is `*`).
fn not_modified(request: &HeaderMap, tag: &HeaderValue) -> bool {
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t.as_bytes() == tag.as_bytes())
}

async fn asset(request: HeaderMap, asset: &'static Asset) -> Response {
    let tag = &*asset.etag;
    let headers = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        ),
        // The assets change with the binary: revalidate rather than serve a stale UI
        // against a newer API; the entity tag makes revalidation a 304 without a body.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::ETAG, tag.clone()),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ];
    if not_modified(&request, tag) {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    (headers, asset.body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{Body, to_bytes};
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    async fn get_path(path: &str) -> Response {
        router::<()>()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    async fn text(response: Response) -> String {
        String::from_utf8(
            to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap()
                .to_vec(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn every_page_serves_the_same_document_with_a_strict_csp() {
        for path in ["/", "/ui/runs/01a2-some-run", "/ui/builds", "/ui/flow"] {
            let response = get_path(path).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "text/html; charset=utf-8"
            );
            let csp = response.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .to_owned();
            assert!(csp.starts_with("default-src 'self'"), "{csp}");
            let body = text(response).await;
            assert!(
                body.contains(r#"<script src="/ui/app.js" defer>"#),
                "{body}"
            );
            assert!(body.contains(r#"href="/ui/app.css""#), "{body}");
        }
    }

    #[tokio::test]
    async fn assets_are_served_with_their_types() {
        for (path, content_type) in [
            ("/ui/app.js", "text/javascript; charset=utf-8"),
            ("/ui/app.css", "text/css; charset=utf-8"),
            ("/ui/favicon.svg", "image/svg+xml"),
        ] {
            let response = get_path(path).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], content_type);
            assert!(!text(response).await.is_empty(), "{path}");
        }
    }

    #[tokio::test]
    async fn api_paths_are_left_to_the_api() {
        for path in [
            "/runs",
            "/runs/abc",
            "/limits",
            "/schedules",
            "/healthz",
            "/hooks/cb_x",
            "/ui/nothing",
        ] {
            let response = get_path(path).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[test]
    fn nothing_is_loaded_from_another_origin() {
        for (name, asset) in [
            ("index.html", &INDEX_HTML),
            ("app.js", &APP_JS),
            ("app.css", &APP_CSS),
        ] {
            for needle in ["http://", "https://", "//cdn", "@import"] {
                assert!(!asset.body.contains(needle), "{name} mentions {needle}");
            }
        }
    }

    #[test]
    fn run_pages_live_under_ui_runs() {
        assert_eq!(run_page_path("r1"), "/ui/runs/r1");
    }

    #[tokio::test]
    async fn an_asset_revalidated_with_its_etag_is_not_modified_and_another_tag_gets_the_body() {
        let first = get_path("/ui/app.js").await;
        let tag = first.headers()[header::ETAG].clone();
        assert!(tag.to_str().unwrap().starts_with('"'), "{tag:?}");
        let again = |if_none_match: String| {
            router::<()>().oneshot(
                Request::get("/ui/app.js")
                    .header(header::IF_NONE_MATCH, if_none_match)
                    .body(Body::empty())
                    .unwrap(),
            )
        };
        let same = again(tag.to_str().unwrap().to_owned()).await.unwrap();
        assert_eq!(same.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(same.headers()[header::ETAG], tag);
        assert!(text(same).await.is_empty());
        let other = again("\"0000\"".to_owned()).await.unwrap();
        assert_eq!(other.status(), StatusCode::OK);
        assert!(!text(other).await.is_empty());
        // Different assets have different tags.
        let css = get_path("/ui/app.css").await;
        assert_ne!(css.headers()[header::ETAG], tag);
    }
}
