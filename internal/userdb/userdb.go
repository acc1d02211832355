// Package userdb reads users from the system's user database as the
// daemon's owners (api.Owner: uid, primary group, groups, home), fresh at
// each call; callers that keep an answer keep it briefly (apiserver: a
// minute), so that a user removed from a group, or a uid given to another
// name, is seen.
package userdb

import (
	"fmt"
	"os/user"
	"strconv"

	"github.com/scavenger-ml/scavenger/api"
)

// ByID is the user with uid; found reports whether the database has one
// (if not, the owner is named by its number, with the primary group gid).
func ByID(uid, gid uint32) (o api.Owner, found bool) {
	o = api.Owner{UID: uid, GID: gid, User: strconv.FormatUint(uint64(uid), 10)}
	u, err := user.LookupId(o.User)
	if err != nil {
		return o, false
	}
	return ownerOf(u, gid), true
}

// ByName is the user called name (or with that number).
func ByName(name string) (api.Owner, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return api.Owner{}, fmt.Errorf("no user %q on this node", name)
		}
	}
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return ownerOf(u, uint32(gid)), nil
}

// ownerOf turns a user database entry into an owner with its groups.
func ownerOf(u *user.User, gid uint32) api.Owner {
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
		gid = uint32(g)
	}
	o := api.Owner{UID: uint32(uid), GID: gid, User: u.Username, Home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				o.Groups = append(o.Groups, uint32(g))
			}
		}
	}
	return o
}
