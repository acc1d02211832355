package gceemu

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
)

// ServiceAccountKey is a Google service account key file (JSON) whose
// token_uri is the emulation's token endpoint at baseURL + "/token": a
// program given it through GOOGLE_APPLICATION_CREDENTIALS (Application
// Default Credentials, as in production) authenticates the way it would
// to Google — a JWT signed with the key, exchanged for a token, or sent as
// is — and the emulation accepts any. The key is made afresh (RSA 2048).
func ServiceAccountKey(baseURL, project string) ([]byte, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	return json.MarshalIndent(map[string]string{
		"type": "service_account", "project_id": project, "private_key_id": newID(),
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "scavenger-emulated@" + project + ".iam.gserviceaccount.com", "client_id": newID(),
		"token_uri": baseURL + "/token",
	}, "", "  ")
}

// token answers an OAuth 2.0 token request with a token (any request: the
// emulation checks no credentials).
func token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") == "" {
		http.Error(w, `{"error": "invalid_request"}`, http.StatusBadRequest)
		return
	}
	writeJSON(w, map[string]any{"access_token": "emulated-" + newID(), "token_type": "Bearer", "expires_in": 3600})
}
