# Test hosts for scripts/slurm/cluster.sh --hosts N (sourced, not run): each "host" is a network
# namespace plus a UTS namespace for its processes, so it has its own network stack, address and
# hostname, like a node of a cluster; the file system stays shared, as Lustre/NFS is on a cluster.
#
#   head   10.231.0.1    slurmctld; `cluster.sh run` runs its command here (sbatch, srun, scontrol)
#   hostI  10.231.0.1I   slurmd (I = 1..N); jobs' tasks run here and see hostname hostI
#
# The namespaces hang off one bridge through veth pairs (root side wv<id><i>, inside eth0). Nothing
# is addressed outside the namespaces made here: the bridge itself has no address, so the root
# namespace cannot reach the hosts (and nothing on the hosts can reach outside this machine).
# Faults for tests: hosts_kill (every process of a host, kill -9), hosts_link I down|up (a partition:
# packets dropped, no reset), hosts_delay I MS (netem on its link), hosts_rate I RATE (a token bucket
# on its link: a slow link where the kernel has no netem). munged's socket is a file, so one
# munged serves every namespace.
#
# Names carry an id that hosts_up claims (random; the bridge wbr<id> is created first, and a name
# already taken is drawn again), so several clusters coexist whatever their directories are called.
# Every object hosts_up makes is listed in DIR/hosts-made as soon as it exists; hosts_down removes
# exactly those (also after a partial start, never another cluster's) and is called by cluster.sh stop.

hosts_net=10.231.0

hosts_id() { cat "$1/hosts-id"; }                    # hosts_id DIR
hosts_ns() { echo "wmtp-$(hosts_id "$1")-$2"; }      # hosts_ns DIR head|hostI
hosts_veth() { echo "wv$(hosts_id "$1")$2"; }        # hosts_veth DIR head|I: the root-side end

hosts_addr() { [ "$1" = head ] && echo "$hosts_net.1" || echo "$hosts_net.$((10 + $1))"; }

# hosts_exec DIR NAME CMD...: CMD in host NAME's network namespace with its own UTS namespace and
# hostname NAME (what a process on that node sees: gethostname, MPI_Get_processor_name).
hosts_exec() {
  local dir=$1 name=$2; shift 2
  # nsenter, not `ip netns exec`: that remounts /sys, hiding /sys/fs/cgroup, without which slurmd
  # does not start.
  nsenter --net="/run/netns/$(hosts_ns "$dir" "$name")" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}

# hosts_made DIR KIND NAME: record an object hosts_up made (KIND: link | netns | mount).
hosts_made() { echo "$2 $3" >> "$1/hosts-made"; }

# hosts_up DIR N: the bridge, the head and N hosts. Refuses (exit 1, a reason) where namespaces
# cannot be made: not root, no CAP_SYS_ADMIN/CAP_NET_ADMIN (an unprivileged container), no iproute2.
hosts_up() {
  local dir=$1 n=$2 id i name ns veth err tries=0
  command -v ip > /dev/null && command -v unshare > /dev/null \
    || die "--hosts needs iproute2 (ip) and util-linux (unshare)"
  echo "$n" > "$dir/hosts"
  : > "$dir/hosts-made"
  # The id: 6 hex digits, claimed by creating the bridge that carries it (creating a link whose name
  # exists fails, so two clusters never share an id; interface names stay under 16 characters).
  while :; do
    id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    err=$(ip link add "wbr$id" type bridge 2>&1) && break
    tries=$((tries + 1))
    [[ "$err" == *"File exists"* && $tries -lt 20 ]] && continue
    die "--hosts: cannot create a bridge ($err): it needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN (a" \
        "privileged container); use --nodes N instead (one host)"
  done
  hosts_made "$dir" link "wbr$id"
  echo "$id" > "$dir/hosts-id"
  local probe="wmtp-$id-probe"
  ip netns add "$probe" 2> "$dir/log/netns-probe.log" \
    || die "--hosts: cannot create network namespaces here ($(cat "$dir/log/netns-probe.log")): it needs root" \
           "with CAP_SYS_ADMIN and CAP_NET_ADMIN (a privileged container); use --nodes N instead (one host)"
  ip netns del "$probe"
  unshare --uts true 2> /dev/null || die "--hosts: cannot create UTS namespaces here (unshare --uts failed)"
  # A name for this (the root) network namespace, for the fault helpers run from the head.
  mkdir -p /run/netns && touch "/run/netns/wmtp-root-$id" && hosts_made "$dir" mount "/run/netns/wmtp-root-$id" \
    && mount --bind /proc/self/ns/net "/run/netns/wmtp-root-$id" \
    || die "--hosts: cannot name the root network namespace (/run/netns)"
  ip link set "wbr$id" up
  for name in head $(seq 1 "$n"); do
    local hname=$name; [ "$name" = head ] || hname=host$name
    ns=$(hosts_ns "$dir" "$hname"); veth=$(hosts_veth "$dir" "$name")
    ip netns add "$ns" || die "--hosts: ip netns add $ns failed"
    hosts_made "$dir" netns "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns" || die "--hosts: veth for $hname failed"
    hosts_made "$dir" link "$veth"
    ip link set "$veth" master "wbr$id" up
    ip -n "$ns" addr add "$(hosts_addr "$name")/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
  done
}

# hosts_pids DIR NAME: the processes in host NAME's network namespace.
hosts_pids() { ip netns pids "$(hosts_ns "$1" "$2")" 2> /dev/null || true; }

# hosts_kill DIR I: kill -9 every process on host I (its slurmd, slurmstepd and ranks): a lost node.
hosts_kill() {
  local pid
  for pid in $(hosts_pids "$1" "host$2"); do kill -KILL "$pid" 2> /dev/null || true; done
}

# hosts_root DIR CMD...: CMD in the root network namespace (where the bridge and the cables are),
# from wherever the caller is (a test runs on the head).
hosts_root() { local dir=$1; shift; nsenter --net="/run/netns/wmtp-root-$(hosts_id "$dir")" "$@"; }

# hosts_link DIR I down|up: host I's cable (its veth on the bridge); down drops packets without a reset.
hosts_link() { hosts_root "$1" ip link set "$(hosts_veth "$1" "$2")" "$3"; }

# hosts_delay DIR I MS: every packet to host I waits MS ms (netem); MS = 0 removes the delay.
hosts_delay() {
  local veth; veth=$(hosts_veth "$1" "$2")
  if [ "$3" = 0 ]; then hosts_root "$1" tc qdisc del dev "$veth" root 2> /dev/null || true
  else hosts_root "$1" tc qdisc replace dev "$veth" root netem delay "${3}ms"; fi
}

# hosts_rate DIR I RATE: every packet to host I goes through a token bucket of RATE (tc units, e.g.
# 20mbit): a slow link, for kernels without sch_netem (tbf is built in more often). A queue of up to
# 10 s, so that nothing is dropped; RATE = 0 removes it.
hosts_rate() {
  local veth; veth=$(hosts_veth "$1" "$2")
  if [ "$3" = 0 ]; then hosts_root "$1" tc qdisc del dev "$veth" root 2> /dev/null || true
  else hosts_root "$1" tc qdisc replace dev "$veth" root tbf rate "$3" burst 32kbit latency 10s; fi
}

# hosts_down DIR: what hosts_up listed in DIR/hosts-made, newest first: the processes in its
# namespaces killed and the namespaces deleted (their veths go with them), its links, the root
# namespace's name (never its processes).
hosts_down() {
  local dir=$1 kind name pid
  [ -f "$dir/hosts-made" ] || return 0
  while read -r kind name; do
    case "$kind" in
      netns)
        for pid in $(ip netns pids "$name" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null || true; done
        ip netns del "$name" 2> /dev/null || true ;;
      link) ip link del "$name" 2> /dev/null || true ;;
      mount) umount "$name" 2> /dev/null; rm -f "$name" ;;
    esac
  done < <(tac "$dir/hosts-made")
  rm -f "$dir/hosts-made"
}
