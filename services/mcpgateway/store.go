package mcpgateway

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/errclass"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// ServerStore keeps the servers added with AddServer, so that every gateway replica connects to
// them (a tool call may reach any replica) and they survive a restart. Servers of the
// --mcp-servers file are not stored: every replica loads the file itself.
type ServerStore interface {
	// CreateServer stores a spec; errclass.Exists when the name is taken.
	CreateServer(ctx context.Context, spec *pb.ServerSpec) error
	// DeleteServer removes a spec; errclass.NotFound when there is none.
	DeleteServer(ctx context.Context, name string) error
	// ListServers returns every stored spec.
	ListServers(ctx context.Context) ([]*pb.ServerSpec, error)
}

// RedisServerStore keeps specs in one Redis hash, name → protobuf spec.
type RedisServerStore struct {
	rdb    *redis.Client
	key    string
	prefix string // of the per-user OAuth keys (connstore.go)
}

// NewRedisServerStore returns a store under the key prefix+"servers".
func NewRedisServerStore(rdb *redis.Client, prefix string) *RedisServerStore {
	return &RedisServerStore{rdb: rdb, key: prefix + "servers", prefix: prefix}
}

// CreateServer implements ServerStore.
func (s *RedisServerStore) CreateServer(ctx context.Context, spec *pb.ServerSpec) error {
	raw, err := proto.Marshal(spec)
	if err != nil {
		return err
	}
	ok, err := s.rdb.HSetNX(ctx, s.key, spec.GetName(), raw).Result()
	if err != nil {
		return errclass.Mark(errclass.Unavailable, "redis", err)
	}
	if !ok {
		return errclass.Errorf(errclass.Exists, "a server named %q exists; remove it first", spec.GetName())
	}
	return nil
}

// DeleteServer implements ServerStore.
func (s *RedisServerStore) DeleteServer(ctx context.Context, name string) error {
	n, err := s.rdb.HDel(ctx, s.key, name).Result()
	if err != nil {
		return errclass.Mark(errclass.Unavailable, "redis", err)
	}
	if n == 0 {
		return errclass.Errorf(errclass.NotFound, "no server named %q", name)
	}
	return nil
}

// ListServers implements ServerStore.
func (s *RedisServerStore) ListServers(ctx context.Context) ([]*pb.ServerSpec, error) {
	all, err := s.rdb.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	out := make([]*pb.ServerSpec, 0, len(all))
	for _, v := range all {
		spec, err := decodeSpec([]byte(v))
		if err != nil {
			return nil, err
		}
		out = append(out, spec)
	}
	return out, nil
}

func decodeSpec(raw []byte) (*pb.ServerSpec, error) {
	spec := &pb.ServerSpec{}
	if err := proto.Unmarshal(raw, spec); err != nil {
		return nil, fmt.Errorf("decode stored MCP server: %w", err)
	}
	return spec, nil
}

// BoltServerStore keeps specs in a bbolt file (monolithic mode).
type BoltServerStore struct {
	db *bolt.DB
}

var bServers = []byte("servers")

// OpenBoltServerStore opens or creates the file.
func OpenBoltServerStore(path string) (*BoltServerStore, error) {
	db, err := boltstore.Open(path, nil, bServers, bConnections, bAuthStates, bPendingAuth)
	if err != nil {
		return nil, err
	}
	return &BoltServerStore{db: db}, nil
}

// Close closes the file.
func (s *BoltServerStore) Close() error { return s.db.Close() }

// CreateServer implements ServerStore.
func (s *BoltServerStore) CreateServer(_ context.Context, spec *pb.ServerSpec) error {
	raw, err := proto.Marshal(spec)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bServers)
		if b.Get([]byte(spec.GetName())) != nil {
			return errclass.Errorf(errclass.Exists, "a server named %q exists; remove it first", spec.GetName())
		}
		return b.Put([]byte(spec.GetName()), raw)
	})
}

// DeleteServer implements ServerStore.
func (s *BoltServerStore) DeleteServer(_ context.Context, name string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bServers)
		if b.Get([]byte(name)) == nil {
			return errclass.Errorf(errclass.NotFound, "no server named %q", name)
		}
		return b.Delete([]byte(name))
	})
}

// ListServers implements ServerStore.
func (s *BoltServerStore) ListServers(_ context.Context) ([]*pb.ServerSpec, error) {
	var out []*pb.ServerSpec
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bServers).ForEach(func(_, v []byte) error {
			spec, err := decodeSpec(v)
			if err == nil {
				out = append(out, spec)
			}
			return err
		})
	})
	return out, err
}
