//! The error answers every operation of the OpenAPI document lists, whatever its handler.

/// Adds to every operation the error answers the server's layers give whatever the handler:
/// 400 (a body or path that does not parse or validate), 401 and 403 (a route with a token),
/// 408 (too slow), 413 (a body over the limit), 429 (over the address's rate), 503 (database or
/// verification busy). Clients
/// generated from the document must know them all.
pub fn document_errors(api: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let error = |what: &str| {
        ResponseBuilder::new()
            .description(what)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ApiError")))
                    .build(),
            )
            .build()
    };
    for item in api.paths.paths.values_mut() {
        for op in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
            let has_input =
                op.request_body.is_some() || op.parameters.as_ref().is_some_and(|p| !p.is_empty());
            let mut add = |code: &str, what: &str| {
                op.responses
                    .responses
                    .entry(code.to_string())
                    .or_insert_with(|| error(what).into());
            };
            if has_input {
                add("400", "bad_request: the input does not parse or validate");
            }
            if secured {
                add("401", "unauthorized: missing, malformed or unknown token");
                add("403", "forbidden: the token may not do this");
            }
            add("408", "timeout: the request took too long");
            add(
                "429",
                "rate_limited: too many requests from this address; see Retry-After",
            );
            if op.request_body.is_some() {
                add(
                    "413",
                    "payload_too_large: the body exceeds the server's limit",
                );
            }
            add("503", "unavailable: retry after Retry-After seconds");
        }
    }
}
