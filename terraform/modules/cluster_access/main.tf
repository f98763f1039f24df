# What the control plane may do in the sandbox cluster, and the namespace it does it in.
#
# The functions call the Kubernetes API as their own Google service accounts (Google's default
# credentials on Cloud Run). GKE authenticates such a caller only if it holds
# container.clusters.get in IAM (roles/container.clusterViewer, which grants no Kubernetes
# object), then authorizes it by Kubernetes RBAC, where a Google service account is a subject
# of kind User named by its email (GKE, "Authorize actions in clusters using role-based access
# control": https://cloud.google.com/kubernetes-engine/docs/how-to/role-based-access-control).
# The Role below is exactly what hangar's gke:// backend calls (sandboxes/gke.py, gkepools.py).

locals {
  namespace = kubernetes_namespace_v1.sandboxes.metadata[0].name
}

resource "google_project_iam_member" "cluster_viewer" {
  for_each = var.control_plane_service_accounts

  project = var.project_id
  role    = "roles/container.clusterViewer"
  member  = "serviceAccount:${each.value}"
}

resource "kubernetes_namespace_v1" "sandboxes" {
  metadata {
    name = var.namespace

    labels = {
      "app.kubernetes.io/managed-by" = "terraform"
    }
  }
}

resource "kubernetes_role_v1" "control_plane" {
  metadata {
    name      = "hangar-control-plane"
    namespace = local.namespace
  }

  # Sandboxes: read only (the claim's Sandbox names its pod). Subresources as the v1beta1 CRDs
  # declare them: Sandbox and SandboxClaim have status, SandboxWarmPool status and scale,
  # SandboxTemplate none.
  rule {
    api_groups = ["agents.x-k8s.io"]
    resources  = ["sandboxes"]
    verbs      = ["get", "list", "watch"]
  }

  rule {
    api_groups = ["agents.x-k8s.io"]
    resources  = ["sandboxes/status"]
    verbs      = ["get"]
  }

  # Templates, warm pools and claims: made, watched, repointed and deleted by hangar.
  rule {
    api_groups = ["extensions.agents.x-k8s.io"]
    resources  = ["sandboxtemplates", "sandboxwarmpools", "sandboxclaims"]
    verbs      = ["create", "get", "list", "watch", "patch", "delete"]
  }

  # Their status is the controller's to write: hangar only reads it.
  rule {
    api_groups = ["extensions.agents.x-k8s.io"]
    resources  = ["sandboxwarmpools/status", "sandboxclaims/status"]
    verbs      = ["get"]
  }

  # A warm pool's size follows its schedule through the scale subresource.
  rule {
    api_groups = ["extensions.agents.x-k8s.io"]
    resources  = ["sandboxwarmpools/scale"]
    verbs      = ["get", "patch"]
  }

  rule {
    api_groups = [""]
    resources  = ["pods"]
    verbs      = ["get", "list", "watch"]
  }

  # Every command runs through exec (a websocket upgrade of a GET, authorized as create).
  rule {
    api_groups = [""]
    resources  = ["pods/exec"]
    verbs      = ["create", "get"]
  }

  # Start-up reasons: the scheduler's, the autoscaler's and the kubelet's events.
  rule {
    api_groups = [""]
    resources  = ["events"]
    verbs      = ["get", "list", "watch"]
  }
}

resource "kubernetes_role_binding_v1" "control_plane" {
  metadata {
    name      = "hangar-control-plane"
    namespace = local.namespace
  }

  role_ref {
    api_group = "rbac.authorization.k8s.io"
    kind      = "Role"
    name      = kubernetes_role_v1.control_plane.metadata[0].name
  }

  dynamic "subject" {
    for_each = var.control_plane_service_accounts

    content {
      api_group = "rbac.authorization.k8s.io"
      kind      = "User"
      name      = subject.value
    }
  }
}

# The namespace's baseline: no ingress, and no egress but DNS, for every pod in it.
#
# The sandboxes' real policy is hangar's: it writes it into each SandboxTemplate
# (agentsandbox.network_policy: egress anywhere but the metadata server, the cluster's internal
# ranges, the URL's deny= ranges and the control plane), and the Agent Sandbox controller makes
# it a NetworkPolicy on the template's pods. Terraform does not copy that policy: NetworkPolicy
# allows add up, so a copy here would re-open whatever a narrower deny= closes. This baseline
# allows less than any policy hangar writes, so it never widens one; it fails closed for a pod
# that has none of its own (a template written before hangar's policy, or one whose policy the
# controller has not made yet): such a pod reaches neither the metadata server nor anything
# else.
resource "kubernetes_network_policy_v1" "baseline" {
  metadata {
    name      = "hangar-baseline"
    namespace = local.namespace
  }

  spec {
    pod_selector {}
    policy_types = ["Ingress", "Egress"]

    egress {
      dynamic "to" {
        for_each = var.dns_peers

        content {
          namespace_selector {
            match_labels = { "kubernetes.io/metadata.name" = "kube-system" }
          }

          pod_selector {
            match_labels = to.value
          }
        }
      }

      ports {
        protocol = "UDP"
        port     = "53"
      }

      ports {
        protocol = "TCP"
        port     = "53"
      }
    }
  }
}
