"""The Java/Python contract: the local channel's frames and the increment's codes, generated from
`protos/contract/*.toml` (see `statestore.contract.generate`)."""
