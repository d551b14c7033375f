"""Provider adapters' domain: the adapter queue message, pure verification rules over
provider-shaped data (AWS EBS, GCP Persistent Disk, Kubernetes PVC), read-only attach/mount plans,
and the runner that executes one message. Imports no cloud SDK: the SDK calls live in
`infercrane.adapters.{ec2,gce,kubernetes_pvc}` behind `infercrane.ports.providers`."""

from infercrane.domain.providers.message import AdapterMessage, Target
from infercrane.domain.providers.model import Assessment, ProviderCallFailed, Verdict

__all__ = ["AdapterMessage", "Assessment", "ProviderCallFailed", "Target", "Verdict"]
