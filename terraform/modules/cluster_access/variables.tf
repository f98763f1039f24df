variable "project_id" {
  description = "Project of the sandbox cluster (where the control plane gets roles/container.clusterViewer)."
  type        = string
}

variable "namespace" {
  description = "Kubernetes namespace of the sandboxes (the NAMESPACE of HANGAR_SANDBOXES=gke://CONTEXT/NAMESPACE)."
  type        = string
  default     = "hangar-sandboxes"
}

variable "control_plane_service_accounts" {
  description = "Emails of the control plane's Google service accounts (the functions), keyed by name: each is bound to the namespace's Role as an RBAC subject of kind User."
  type        = map(string)
}

variable "dns_peers" {
  description = "Labels of the kube-system pods that answer DNS (kube-dns, and the NodeLocal DNSCache that answers in its stead where it is on): the only egress the namespace's baseline policy allows."
  type        = list(map(string))
  default     = [{ "k8s-app" = "kube-dns" }, { "k8s-app" = "node-local-dns" }]
}
