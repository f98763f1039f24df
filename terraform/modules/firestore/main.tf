# The state database and the composite indexes the db port's queries need. Collection names
# are the Firestore backend's: sessions, turns, checkpoints, ticks.

resource "google_firestore_database" "hangar" {
  project                 = var.project_id
  name                    = var.database_name
  location_id             = var.location
  type                    = "FIRESTORE_NATIVE"
  concurrency_mode        = "OPTIMISTIC"
  delete_protection_state = var.delete_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy         = var.delete_protection ? "ABANDON" : "DELETE"
}

# list sessions: where state == S order by created_at desc; a page of them by state, the same
# with order by created_at desc, __name__ desc (which this index holds: the name comes last,
# in the last field's direction)
resource "google_firestore_index" "sessions_by_state" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "sessions"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }

  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}

# a page of sessions by name prefix: where name >= P and name < END [and created_at < T]
# order by created_at desc, name desc. Firestore's ranges on several fields: the index holds
# the equality fields, then the order-by fields, then the range fields (name, ordered in
# created_at's direction). The sessions made at one instant are read with where created_at ==
# T [and state == S], which the single-field indexes (and sessions_by_state) serve.
resource "google_firestore_index" "sessions_by_name_prefix" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "sessions"

  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }

  fields {
    field_path = "name"
    order      = "DESCENDING"
  }
}

# the same in one state: where state == S and name >= P and name < END [and created_at < T]
resource "google_firestore_index" "sessions_by_state_and_name_prefix" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "sessions"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }

  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }

  fields {
    field_path = "name"
    order      = "DESCENDING"
  }
}

# the same three by last activity (a page of sessions with order=activity): where state == S
# order by last_active_at desc, __name__ desc; the name prefix ranges [and last_active_at < T]
# order by last_active_at desc, name desc, without and with a state. Sessions active at one
# instant are read with where last_active_at == T [and state == S], which the single-field
# indexes (and sessions_by_state_and_activity) serve.
resource "google_firestore_index" "sessions_by_state_and_activity" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "sessions"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }

  fields {
    field_path = "last_active_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "sessions_by_name_prefix_and_activity" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "sessions"

  fields {
    field_path = "last_active_at"
    order      = "DESCENDING"
  }

  fields {
    field_path = "name"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "sessions_by_state_name_prefix_and_activity" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "sessions"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }

  fields {
    field_path = "last_active_at"
    order      = "DESCENDING"
  }

  fields {
    field_path = "name"
    order      = "DESCENDING"
  }
}

# a session's checkpoints, oldest first (restore falls back to older ones; pruning drops them)
resource "google_firestore_index" "checkpoints_by_session" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "checkpoints"

  fields {
    field_path = "session_id"
    order      = "ASCENDING"
  }

  fields {
    field_path = "ts"
    order      = "ASCENDING"
  }
}

# a session's turns in order
resource "google_firestore_index" "turns_by_session" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "turns"

  fields {
    field_path = "session_id"
    order      = "ASCENDING"
  }

  fields {
    field_path = "n"
    order      = "ASCENDING"
  }
}

# list due ticks: where due_at <= T order by due_at. One field, so Firestore serves it from a
# single-field index (it refuses one-field composite indexes); declared here so that it cannot
# be exempted by accident.
resource "google_firestore_field" "ticks_due_at" {
  project    = var.project_id
  database   = google_firestore_database.hangar.name
  collection = "ticks"
  field      = "due_at"

  index_config {
    indexes {
      order       = "ASCENDING"
      query_scope = "COLLECTION"
    }
  }
}

# Firestore user on this database only (IAM condition), for the control plane.
resource "google_project_iam_member" "datastore_user" {
  for_each = var.control_plane_service_accounts

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${each.value}"

  condition {
    title      = "hangar-database-only"
    expression = "resource.name == \"projects/${var.project_id}/databases/${var.database_name}\""
  }
}
