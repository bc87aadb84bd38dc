//! The SDK's one error type. Messages are static strings: the wasm carries no
//! formatting machinery, and the boundary turns them into `JsError`s.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// `init` was not called (or failed) before another method.
    NotInitialized,
    /// `init` was given something other than `{siteId, endpoint?, variant?, debug?}`.
    BadOptions,
    /// The page has no `document` (a worker, or a document being torn down).
    NoDom,
}

impl Error {
    pub fn message(self) -> &'static str {
        match self {
            Error::NotInitialized => "Postern: call init({siteId}) first",
            // The one thing `Options::from_js` refuses: the other options take defaults.
            Error::BadOptions => "Postern: init needs {siteId: string}",
            Error::NoDom => "Postern: no window or document",
        }
    }
}

pub type Result<T> = core::result::Result<T, Error>;
