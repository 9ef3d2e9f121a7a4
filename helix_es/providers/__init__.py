"""Model providers the views call: summarisers and embedders, and the HTTP client they share."""
