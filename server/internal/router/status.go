package router

import (
	"context"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/cluster"
)

// Status implements api.Cluster: the cluster as etcd sees it now.
func (rt *Router) Status(r *http.Request) (any, error) {
	// An etcd that does not answer gets an answer too.
	ctx, cancel := context.WithTimeout(r.Context(), rt.o.RequestTimeout)
	defer cancel()
	st, err := cluster.ReadStatus(ctx, rt.o.View.c, rt.o.View.k)
	if err != nil {
		rt.o.Metrics.etcdErrors.Inc()
		return nil, &routeError{http.StatusServiceUnavailable, api.CodeClusterUnavailable, "cluster state unreadable: " + err.Error(), err}
	}
	return st, nil
}
