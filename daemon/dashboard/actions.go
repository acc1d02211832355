package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/scavenger-ml/scavenger/api"
)

// The job page's actions go through the API as the viewer, so that they
// follow its rules: only the owner or root stops or moves a job.

// actionResult is what an action answers the page's script.
type actionResult struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request, v viewer) {
	id := r.PathValue("id")
	j, err := s.o.As(v.owner).Stop(r.Context(), id, 0)
	s.acted(w, r, id, fmt.Sprintf("Stop asked: job %s is %s.", id, j.State), err)
}

func (s *Server) move(w http.ResponseWriter, r *http.Request, v viewer) {
	id := r.PathValue("id")
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	workers, werr := strconv.Atoi(strings.TrimSpace(r.PostFormValue("workers")))
	batch, berr := strconv.Atoi(strings.TrimSpace(r.PostFormValue("batch")))
	if werr != nil || berr != nil || workers < 1 || batch < 0 {
		s.acted(w, r, id, "", fmt.Errorf("%w: move: give workers (1 or more) and a batch (0: the script's own) as whole numbers", api.ErrBadRequest))
		return
	}
	src := s.o.As(v.owner)
	j, err := src.Job(r.Context(), id)
	if err != nil {
		s.acted(w, r, id, "", err)
		return
	}
	cfg := j.Config
	cfg.Workers, cfg.GlobalBatch = workers, batch
	ctx, cancel := context.WithTimeout(r.Context(), api.Timeout(api.VerbMove))
	defer cancel()
	j, err = src.Move(ctx, id, cfg, "requested from the dashboard by "+v.owner.User)
	s.acted(w, r, id, fmt.Sprintf("Moved: job %s runs at %s.", id, configText(j.Config)), err)
}

// acted answers an action: the page's script (which sends X-CSRF-Token)
// gets JSON, a form without script is sent back to the job's page.
func (s *Server) acted(w http.ResponseWriter, r *http.Request, id, msg string, err error) {
	code := http.StatusOK
	if err != nil {
		code, msg = statusOf(err), err.Error()
	}
	if r.Header.Get("X-CSRF-Token") == "" && r.Header.Get("Accept") != "application/json" {
		if err != nil {
			s.pages.error(w, code, msg)
			return
		}
		http.Redirect(w, r, "/ui/job/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(actionResult{OK: err == nil, Message: msg})
}
