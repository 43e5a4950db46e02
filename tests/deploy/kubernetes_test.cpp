// The Kubernetes manifests under deploy/kubernetes: `kubectl kustomize` renders them offline,
// every object matches the Kubernetes API's own types (tests/deploy/kubernetes_schema.py, on
// Debian's python3-kubernetes), and the objects agree with one another and with triad's config:
// selectors pick the pods they mean, Service ports land on container ports, probes and scrape
// annotations use [server].port, the headless Services carry [cluster]'s ports and are its peers,
// and the ConfigMap's triad.toml is one triad's own parser reads.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>
#include <toml++/toml.h>

#include "actors/node_config.hpp"
#include "tests/process.hpp"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

// The Debian Python that python3-yaml and python3-kubernetes install into.
constexpr const char* python = "/usr/bin/python3";

fs::path source_dir() {
  const char* dir = std::getenv("TRIAD_SOURCE_DIR");
  BOOST_REQUIRE_MESSAGE(dir != nullptr, "TRIAD_SOURCE_DIR is not set (ctest sets it)");
  return dir;
}

// A path as one shell word (the source tree's paths hold no quote).
std::string quoted(const fs::path& p) {
  std::string out = p.string();
  out.insert(out.begin(), '\'');
  out.push_back('\'');
  return out;
}

// The tools must be there: scripts/install-deps.sh --test installs them.
void require_tools() {
  BOOST_REQUIRE_MESSAGE(triad::test::run_command("command -v kubectl >/dev/null").status == 0,
                        "kubectl not found (Debian package kubernetes-client): run "
                        "scripts/install-deps.sh --test");
  BOOST_REQUIRE_MESSAGE(
      triad::test::run_command(std::string{python} +
                               " -c 'import yaml, kubernetes.client' 2>/dev/null")
              .status == 0,
      python << " cannot import yaml and kubernetes.client (Debian packages python3-yaml, "
                "python3-kubernetes): run scripts/install-deps.sh --test");
}

// `kubectl kustomize deploy/kubernetes`, once.
const std::string& rendered() {
  static const std::string text = [] {
    require_tools();
    auto r =
        triad::test::run_command("kubectl kustomize " + quoted(source_dir() / "deploy/kubernetes"));
    BOOST_REQUIRE_MESSAGE(r.status == 0, "kubectl kustomize deploy/kubernetes failed (exit "
                                             << r.status << "; its messages are above)");
    return r.out;
  }();
  return text;
}

// Runs the schema check on a YAML text; with `merge_stderr` its messages come in `out` too.
triad::test::process_result schema_check(const std::string& yaml, bool merge_stderr) {
  require_tools();
  char name[] = "/tmp/triad-k8s-XXXXXX";
  int fd = ::mkstemp(name);
  BOOST_REQUIRE_MESSAGE(fd >= 0, "mkstemp failed");
  ::close(fd);
  {
    std::ofstream out{name};
    out << yaml;
  }
  auto r = triad::test::run_command(std::string{python} + " " +
                                    quoted(source_dir() / "tests/deploy/kubernetes_schema.py") +
                                    " < " + name + (merge_stderr ? " 2>&1" : ""));
  fs::remove(name);
  return r;
}

// The rendered objects, once they passed the schema check.
const json::array& objects() {
  static const json::array docs = [] {
    auto r = schema_check(rendered(), false);
    BOOST_REQUIRE_MESSAGE(r.status == 0, "the rendered manifests fail the schema check (exit "
                                             << r.status << "; the problems are above)");
    return json::parse(r.out).as_array();
  }();
  return docs;
}

std::string str(const json::value& v) {
  return json::value_to<std::string>(v);
}

std::vector<const json::object*> of_kind(const std::string& kind) {
  std::vector<const json::object*> out;
  for (const auto& d : objects())
    if (str(d.at("kind")) == kind)
      out.push_back(&d.as_object());
  return out;
}

std::string name_of(const json::object& o) {
  return str(o.at("metadata").at("name"));
}

const json::object& find(const std::string& kind, const std::string& name) {
  for (const auto* o : of_kind(kind))
    if (name_of(*o) == name)
      return *o;
  BOOST_FAIL("no " << kind << " " << name << " in the rendered manifests");
  throw; // not reached
}

// The Deployments and StatefulSets.
std::vector<const json::object*> workloads() {
  auto out = of_kind("Deployment");
  for (const auto* s : of_kind("StatefulSet"))
    out.push_back(s);
  return out;
}

const json::object& pod_spec(const json::object& workload) {
  return workload.at("spec").at("template").at("spec").as_object();
}

std::map<std::string, std::string> string_map(const json::value* v) {
  std::map<std::string, std::string> out;
  if (v != nullptr)
    for (const auto& [k, x] : v->as_object())
      out[std::string{k}] = str(x);
  return out;
}

std::map<std::string, std::string> pod_labels(const json::object& workload) {
  return string_map(
      workload.at("spec").at("template").at("metadata").as_object().if_contains("labels"));
}

bool selects(const std::map<std::string, std::string>& selector,
             const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v)
      return false;
  }
  return !selector.empty();
}

// The workloads whose pods a label selector picks.
std::vector<const json::object*> selected(const std::map<std::string, std::string>& selector) {
  std::vector<const json::object*> out;
  for (const auto* w : workloads())
    if (selects(selector, pod_labels(*w)))
      out.push_back(w);
  return out;
}

// The one container of a workload's pods that runs triad-node.
const json::object& triad_container(const json::object& workload) {
  const json::object* found = nullptr;
  for (const auto& c : pod_spec(workload).at("containers").as_array())
    if (const auto* cmd = c.as_object().if_contains("command");
        cmd != nullptr && !cmd->as_array().empty() && str(cmd->as_array()[0]) == "triad-node") {
      BOOST_REQUIRE_MESSAGE(found == nullptr, name_of(workload) << " runs triad-node twice");
      found = &c.as_object();
    }
  BOOST_REQUIRE_MESSAGE(found != nullptr, name_of(workload) << " runs no triad-node container");
  return *found;
}

std::vector<std::string> args_of(const json::object& container) {
  std::vector<std::string> out;
  for (const auto& a : container.at("args").as_array())
    out.push_back(str(a));
  return out;
}

// The value after `flag` in a container's args, or "".
std::string arg(const json::object& container, const std::string& flag) {
  auto args = args_of(container);
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag)
      return args[i + 1];
  return {};
}

// A container port by name or number (a Service's targetPort, a probe's port).
std::optional<std::int64_t> container_port(const json::object& container, const json::value& p) {
  if (const auto* ports = container.if_contains("ports"))
    for (const auto& q : ports->as_array()) {
      const auto& port = q.as_object();
      auto number = port.at("containerPort").to_number<std::int64_t>();
      if (p.is_string() ? port.contains("name") && str(port.at("name")) == str(p)
                        : p.to_number<std::int64_t>() == number)
        return number;
    }
  return std::nullopt;
}

// The ConfigMap the workloads mount triad.toml from.
const json::object& triad_config_map() {
  auto maps = of_kind("ConfigMap");
  BOOST_REQUIRE_EQUAL(maps.size(), 1u);
  BOOST_REQUIRE_MESSAGE(maps[0]->at("data").as_object().contains("triad.toml"),
                        "the ConfigMap has no triad.toml");
  return *maps[0];
}

std::string triad_toml() {
  return str(triad_config_map().at("data").at("triad.toml"));
}

// The ConfigMap's triad.toml as plain TOML (its [cluster] read here whatever triad's parser
// knows).
toml::table toml_of_config_map() {
  try {
    const auto text = triad_toml();
    return toml::parse(std::string_view{text}, std::string_view{"triad.toml"});
  } catch (const toml::parse_error& e) {
    BOOST_FAIL("the ConfigMap's triad.toml is not TOML: " << e.description());
    throw; // not reached
  }
}

std::int64_t toml_int(const toml::table& t, const char* section, const char* key) {
  auto v = t[section][key].value<std::int64_t>();
  BOOST_REQUIRE_MESSAGE(v.has_value(), "triad.toml has no integer [" << section << "]." << key);
  return *v;
}

std::string toml_string(const toml::table& t, const char* section, const char* key) {
  auto v = t[section][key].value<std::string>();
  BOOST_REQUIRE_MESSAGE(v.has_value(), "triad.toml has no string [" << section << "]." << key);
  return *v;
}

// A headless Service's ports by name.
std::map<std::string, std::int64_t> service_ports(const json::object& service) {
  std::map<std::string, std::int64_t> out;
  for (const auto& p : service.at("spec").at("ports").as_array())
    out[str(p.at("name"))] = p.at("port").to_number<std::int64_t>();
  return out;
}

// The paths a container sees its volumes at, by volume name.
std::map<std::string, std::string> mounts(const json::object& container) {
  std::map<std::string, std::string> out;
  if (const auto* m = container.if_contains("volumeMounts"))
    for (const auto& v : m->as_array())
      out[str(v.at("name"))] = str(v.at("mountPath"));
  return out;
}

const json::object* volume(const json::object& workload, const std::string& name) {
  if (const auto* vs = pod_spec(workload).if_contains("volumes"))
    for (const auto& v : vs->as_array())
      if (str(v.at("name")) == name)
        return &v.as_object();
  return nullptr;
}

// The volume a file path lies in, as (volume, path inside it); volume empty when none.
std::pair<const json::object*, std::string> volume_holding(const json::object& workload,
                                                           const json::object& container,
                                                           const std::string& path) {
  for (const auto& [name, at] : mounts(container))
    if (path.size() > at.size() + 1 && path.compare(0, at.size(), at) == 0 &&
        path[at.size()] == '/')
      return {volume(workload, name), path.substr(at.size() + 1)};
  return {nullptr, {}};
}

} // namespace

BOOST_AUTO_TEST_SUITE(kubernetes)

BOOST_AUTO_TEST_CASE(the_manifests_render_offline_with_kubectl_kustomize) {
  const auto& text = rendered();
  BOOST_TEST(text.find("kind: StatefulSet") != std::string::npos);
  BOOST_TEST(text.find("kind: ConfigMap") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(every_object_matches_the_kubernetes_api_types) {
  std::map<std::string, int> kinds;
  for (const auto& d : objects())
    ++kinds[str(d.at("kind"))];
  std::map<std::string, int> expected{{"ConfigMap", 1},
                                      {"Deployment", 1},
                                      {"Service", 3},
                                      {"StatefulSet", 2},
                                      {"PodDisruptionBudget", 3}};
  BOOST_TEST((kinds == expected), "the rendered objects' kinds differ from the manifests'");
}

BOOST_AUTO_TEST_CASE(the_schema_check_catches_unknown_fields_wrong_types_and_missing_fields) {
  const std::string broken = R"(apiVersion: apps/v1
kind: Deployment
metadata:
  name: broken
spec:
  replica: 2
  minReadySeconds: "5"
  selector:
    matchLabels: {a: b}
  template:
    metadata:
      labels: {a: b}
    spec:
      containers:
        - name: c
          image: x
          readinessProbe:
            httpGet: {path: /ready}
---
apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports:
    - targetPort: http
---
apiVersion: v1
kind: Pod
metadata:
  name: p
)";
  auto r = schema_check(broken, true);
  BOOST_TEST(r.status == 1);
  for (const char* expected : {
           "Deployment broken: spec.replica: unknown field of V1DeploymentSpec",
           "Deployment broken: spec.minReadySeconds: expected int, got a string",
           "spec.template.spec.containers[0].readinessProbe.httpGet: V1HTTPGetAction: Invalid "
           "value for `port`, must not be `None`",
           "Service s: spec.ports[0]: V1ServicePort: Invalid value for `port`",
           "Pod p: .: apiVersion 'v1' kind 'Pod' is not one of",
       })
    BOOST_TEST(r.out.find(expected) != std::string::npos, "missing: " << expected << "\nin:\n"
                                                                      << r.out);
}

BOOST_AUTO_TEST_CASE(each_role_runs_in_its_own_workload_with_the_seed_replicas) {
  std::map<std::string, std::pair<std::string, std::int64_t>> expected{
      {"front", {"Deployment", 2}},
      {"prefill", {"StatefulSet", 4}},
      {"decode", {"StatefulSet", 8}}};
  std::set<std::string> roles;
  for (const auto* w : workloads()) {
    const auto& c = triad_container(*w);
    auto role = arg(c, "--role");
    BOOST_TEST_CONTEXT(name_of(*w) << " (--role " << role << ")") {
      BOOST_TEST_REQUIRE(expected.count(role) == 1u);
      BOOST_TEST(roles.insert(role).second, "two workloads run role " << role);
      BOOST_TEST(str(w->at("kind")) == expected[role].first);
      BOOST_TEST(w->at("spec").at("replicas").to_number<std::int64_t>() == expected[role].second);
      BOOST_TEST(arg(c, "--config") == "/etc/triad/triad.toml");
    }
  }
  BOOST_TEST(roles.size() == expected.size());
}

BOOST_AUTO_TEST_CASE(every_selector_picks_exactly_the_pods_it_means) {
  for (const auto* w : workloads()) {
    auto selector = string_map(w->at("spec").at("selector").as_object().if_contains("matchLabels"));
    BOOST_TEST(selects(selector, pod_labels(*w)), name_of(*w) << "'s selector misses its pods");
    BOOST_TEST(selected(selector).size() == 1u, name_of(*w) << "'s selector picks other pods");
  }
  for (const auto* b : of_kind("PodDisruptionBudget")) {
    auto picked =
        selected(string_map(b->at("spec").at("selector").as_object().if_contains("matchLabels")));
    BOOST_TEST_REQUIRE(picked.size() == 1u, "PodDisruptionBudget " << name_of(*b));
    BOOST_TEST(name_of(*picked[0]) == name_of(*b));
  }
  for (const auto* s : of_kind("Service")) {
    auto picked = selected(string_map(s->at("spec").as_object().if_contains("selector")));
    BOOST_TEST(picked.size() == 1u,
               "Service " << name_of(*s) << " picks " << picked.size() << " workloads' pods");
  }
}

BOOST_AUTO_TEST_CASE(service_target_ports_are_ports_of_the_selected_containers) {
  for (const auto* s : of_kind("Service"))
    for (const auto* w : selected(string_map(s->at("spec").as_object().if_contains("selector"))))
      for (const auto& p : s->at("spec").at("ports").as_array()) {
        const auto& port = p.as_object();
        const auto& target = port.contains("targetPort") ? port.at("targetPort") : port.at("port");
        BOOST_TEST(container_port(triad_container(*w), target).has_value(),
                   "Service " << name_of(*s) << " targets port " << json::serialize(target)
                              << " that " << name_of(*w) << "'s container does not expose");
      }
}

BOOST_AUTO_TEST_CASE(device_roles_have_headless_services_that_the_front_joins_as_peers) {
  const auto cfg = toml_of_config_map();
  const auto cluster_port = toml_int(cfg, "cluster", "port");
  BOOST_TEST(toml_string(cfg, "cluster", "listen") == "0.0.0.0");
  std::set<std::string> peers;
  if (const auto* list = cfg["cluster"]["peers"].as_array())
    for (const auto& p : *list)
      peers.insert(p.value<std::string>().value_or("?"));
  std::set<std::string> expected;
  for (const auto* w : of_kind("StatefulSet")) {
    BOOST_TEST_CONTEXT(name_of(*w)) {
      const auto service_name = str(w->at("spec").at("serviceName"));
      const auto& service = find("Service", service_name);
      BOOST_TEST(str(service.at("spec").at("clusterIP")) == "None", "not headless");
      BOOST_TEST(selects(string_map(service.at("spec").as_object().if_contains("selector")),
                         pod_labels(*w)));
      auto ports = service_ports(service);
      BOOST_TEST(ports["cluster"] == cluster_port);
      const auto& c = triad_container(*w);
      BOOST_TEST(container_port(c, json::value(cluster_port)).has_value());
      expected.insert(service_name + ":" + std::to_string(cluster_port));
    }
  }
  BOOST_TEST(expected.size() == 2u);
  BOOST_TEST((peers == expected), "[cluster].peers should be every device role's headless Service");
}

BOOST_AUTO_TEST_CASE(probes_and_scrape_annotations_use_the_configured_http_port) {
  const auto http_port = toml_int(toml_of_config_map(), "server", "port");
  for (const auto* w : workloads()) {
    BOOST_TEST_CONTEXT(name_of(*w)) {
      const auto& c = triad_container(*w);
      const auto& ready = c.at("readinessProbe").at("httpGet");
      BOOST_TEST(str(ready.at("path")) == "/ready");
      BOOST_TEST(container_port(c, ready.at("port")).value_or(-1) == http_port);
      const auto& live = c.at("livenessProbe").at("httpGet");
      BOOST_TEST(str(live.at("path")) == "/health");
      BOOST_TEST(container_port(c, live.at("port")).value_or(-1) == http_port);
      auto annotations = string_map(
          w->at("spec").at("template").at("metadata").as_object().if_contains("annotations"));
      BOOST_TEST(annotations["prometheus.io/scrape"] == "true");
      BOOST_TEST(annotations["prometheus.io/path"] == "/metrics");
      BOOST_TEST(annotations["prometheus.io/port"] == std::to_string(http_port));
    }
  }
}

BOOST_AUTO_TEST_CASE(each_role_requests_its_resources_and_device_pods_their_device) {
  // role -> the device plugin resource its pods take (placeholders), "" for none
  std::map<std::string, std::string> device{
      {"front", ""}, {"prefill", "nvidia.com/gpu"}, {"decode", "sambanova.ai/rdu"}};
  for (const auto* w : workloads()) {
    const auto& c = triad_container(*w);
    const auto role = arg(c, "--role");
    BOOST_TEST_CONTEXT(name_of(*w)) {
      auto requests = string_map(c.at("resources").as_object().if_contains("requests"));
      auto limits = string_map(c.at("resources").as_object().if_contains("limits"));
      BOOST_TEST(requests.count("cpu") == 1u);
      BOOST_TEST(requests.count("memory") == 1u);
      BOOST_TEST(limits.count("memory") == 1u);
      const auto& plugin = device.at(role);
      for (const auto* other : {"nvidia.com/gpu", "sambanova.ai/rdu"})
        if (other != plugin)
          BOOST_TEST(limits.count(other) == 0u, "takes " << other);
      if (!plugin.empty()) {
        // An extended resource is asked for in limits; requests, if given, must be equal.
        BOOST_TEST(limits[plugin] == "1");
        BOOST_TEST(requests[plugin] == limits[plugin]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(pods_mount_the_generated_config_map_and_the_operators_secrets) {
  const auto cfg = toml_of_config_map();
  const auto config_map = name_of(triad_config_map());
  const auto api_key_env = toml_string(cfg, "server", "api_key_env");
  for (const auto* w : workloads()) {
    BOOST_TEST_CONTEXT(name_of(*w)) {
      const auto& c = triad_container(*w);
      // --config lies in the ConfigMap's volume, as its triad.toml.
      auto [config_volume, config_key] = volume_holding(*w, c, arg(c, "--config"));
      BOOST_TEST_REQUIRE(config_volume != nullptr, "--config is in no volume");
      BOOST_TEST(str(config_volume->at("configMap").at("name")) == config_map);
      BOOST_TEST(config_key == "triad.toml");
      // The TLS files of [cluster] lie in one Secret volume (operator-created).
      std::set<std::string> secrets;
      for (const char* key : {"certificate", "key", "cafile"}) {
        auto [v, file] = volume_holding(*w, c, toml_string(cfg, "cluster", key));
        BOOST_TEST_REQUIRE(v != nullptr, "[cluster]." << key << " is in no volume");
        BOOST_TEST_REQUIRE(v->contains("secret"), "[cluster]." << key << " is not in a Secret");
        secrets.insert(str(v->at("secret").at("secretName")));
      }
      BOOST_TEST(secrets.size() == 1u);
      // [server].api_key_env is set from a Secret.
      bool from_secret = false;
      for (const auto& e : c.at("env").as_array())
        if (str(e.at("name")) == api_key_env)
          from_secret = e.as_object().contains("valueFrom") &&
                        e.at("valueFrom").as_object().contains("secretKeyRef");
      BOOST_TEST(from_secret, api_key_env << " does not come from a Secret");
    }
  }
  BOOST_TEST(of_kind("Secret").empty(), "key material in the manifests");
}

BOOST_AUTO_TEST_CASE(pods_run_as_non_root_on_a_read_only_root_filesystem) {
  for (const auto* w : workloads()) {
    BOOST_TEST_CONTEXT(name_of(*w)) {
      BOOST_TEST(pod_spec(*w).at("securityContext").at("runAsNonRoot").as_bool());
      BOOST_TEST(!pod_spec(*w).at("automountServiceAccountToken").as_bool());
      const auto& sc = triad_container(*w).at("securityContext");
      BOOST_TEST(sc.at("readOnlyRootFilesystem").as_bool());
      BOOST_TEST(!sc.at("allowPrivilegeEscalation").as_bool());
    }
  }
}

BOOST_AUTO_TEST_CASE(the_config_maps_triad_toml_is_a_config_triad_reads) {
  auto parsed = triad::parse_config(triad_toml(), "deploy/kubernetes/triad.toml");
  if (!parsed)
    BOOST_FAIL("triad's parser refuses the ConfigMap's triad.toml: " << parsed.error().message);
  BOOST_TEST(std::int64_t{parsed->server.port} == toml_int(toml_of_config_map(), "server", "port"));
  std::map<triad::device_role, int> roles;
  for (const auto& d : parsed->devices)
    ++roles[d.role];
  BOOST_TEST(roles[triad::device_role::prefill] == 1);
  BOOST_TEST(roles[triad::device_role::decode] == 1);
}

BOOST_AUTO_TEST_SUITE_END()
