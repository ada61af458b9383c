package keystore

// The key management services a KEK may live in (kmsSchemes): their
// gocloud.dev/secrets drivers register their URL schemes when imported.
import (
	_ "gocloud.dev/secrets/awskms"
	_ "gocloud.dev/secrets/azurekeyvault"
	_ "gocloud.dev/secrets/gcpkms"
	_ "gocloud.dev/secrets/hashivault"
)
