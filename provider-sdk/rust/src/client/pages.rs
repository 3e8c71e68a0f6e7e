//! Following a list RPC's pages, without trusting the provider to end them.

use std::collections::HashSet;

use tonic::Status;

use super::call::Rpc;
use super::error::invalid_answer;
use super::rpcs::Unary;
use super::{ClientError, ProviderClient};
use crate::error::ProviderError;
use crate::proto::{
    ListLoadBalancersRequest, ListLoadBalancersResponse, ListRoutesRequest, ListRoutesResponse,
    LoadBalancerSummary, Route,
};
use crate::validate::{Checked, violation};

/// The request of a list RPC, as the pager sees it.
pub(super) trait Paged: Unary + Clone {
    type Entry;
    /// This request, for the page of `page_size` after `page_token`.
    fn page(&self, page_size: i32, page_token: String) -> Self;
    /// An answer's entries and its next page token.
    fn split(answer: Self::Response) -> (Vec<Self::Entry>, String);
}

/// `Request -> Response, entries field: Entry;` for each list RPC.
macro_rules! paged {
    ($($request:ident -> $response:ident, $entries:ident: $entry:ident;)*) => {$(
        impl Paged for $request {
            type Entry = $entry;
            fn page(&self, page_size: i32, page_token: String) -> Self {
                $request {
                    page_size,
                    page_token,
                    ..self.clone()
                }
            }
            fn split(answer: $response) -> (Vec<$entry>, String) {
                (answer.$entries, answer.next_page_token)
            }
        }
    )*};
}

paged! {
    ListLoadBalancersRequest -> ListLoadBalancersResponse, load_balancers: LoadBalancerSummary;
    ListRoutesRequest -> ListRoutesResponse, routes: Route;
}

impl ProviderClient {
    /// Every page of `request`'s listing, each entry converted by `convert`
    /// (which gets the entry's index in its page). The pagination is
    /// checked by a [`PageGuard`]; violations name the list RPC. The whole
    /// listing is bounded by `max_list_pages` and `max_list_duration`.
    pub(super) async fn all_pages<Req: Paged, T>(
        &self,
        request: Req,
        convert: impl FnMut(usize, Req::Entry) -> Checked<T>,
    ) -> Result<Vec<T>, ClientError> {
        let budget = self.opts.max_list_duration;
        match tokio::time::timeout(budget, self.follow_pages(request, convert)).await {
            Ok(listed) => listed,
            Err(_) => Err(ClientError::Provider(ProviderError::from_status(
                &Status::deadline_exceeded(format!(
                    "{}: the listing did not end within {budget:?} (the client's budget per listing)",
                    Req::METHOD
                )),
            ))),
        }
    }

    async fn follow_pages<Req: Paged, T>(
        &self,
        request: Req,
        mut convert: impl FnMut(usize, Req::Entry) -> Checked<T>,
    ) -> Result<Vec<T>, ClientError> {
        let page_size = self.opts.page_size;
        let mut out = Vec::new();
        let mut guard = PageGuard::new(self.opts.max_list_pages);
        let mut token = String::new();
        loop {
            let page = request.page(page_size, token);
            let (entries, next) = self.call(Rpc::read(), page, |r| Ok(Req::split(r))).await?;
            guard
                .check(entries.len(), page_size, &next)
                .map_err(invalid_answer(Req::METHOD))?;
            for (i, entry) in entries.into_iter().enumerate() {
                out.push(convert(i, entry).map_err(invalid_answer(Req::METHOD))?);
            }
            if next.is_empty() {
                return Ok(out);
            }
            token = next;
        }
    }
}

/// Stops a provider that paginates wrongly from looping the client forever.
struct PageGuard {
    pages: usize,
    max_pages: usize,
    tokens: HashSet<String>,
}

impl PageGuard {
    fn new(max_pages: usize) -> Self {
        PageGuard {
            pages: 0,
            max_pages: max_pages.max(1),
            tokens: HashSet::new(),
        }
    }

    fn check(&mut self, len: usize, asked: i32, next: &str) -> Checked {
        self.pages += 1;
        if asked > 0 && len > asked as usize {
            return Err(violation(
                "page_size",
                format!("asked for at most {asked} entries, got {len}"),
            ));
        }
        if !next.is_empty() && !self.tokens.insert(next.to_owned()) {
            return Err(violation("next_page_token", "repeats an earlier token"));
        }
        if !next.is_empty() && self.pages >= self.max_pages {
            return Err(violation(
                "next_page_token",
                format!(
                    "the listing did not end within {} pages (the client's limit per listing)",
                    self.max_pages
                ),
            ));
        }
        Ok(())
    }
}
