"""EMULATORS, not providers: small local HTTP servers that serve the providers' documented JSON
(Compute Engine disks/snapshots/images; Kubernetes PVC/PV/VolumeSnapshot/StorageClass) so the
real client libraries can be exercised without a cloud. They cover only what the adapters call.
Used by the tests and, through `infercrane.local.provider_emulators`, by the local stack."""
