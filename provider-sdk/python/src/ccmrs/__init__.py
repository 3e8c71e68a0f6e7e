"""ccm-rs generated code (see ccmrs.cloudprovider.v1)."""
