mod conformance;
mod fixtures;
mod http;

/// The recorded streams and the raw-socket server, under the name the tests use.
mod support {
    pub use anvil_test_support::fixtures::*;
    pub use anvil_test_support::raw_server::*;
}
