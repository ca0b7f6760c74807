"""Dynamic Resource Allocation (``resource.k8s.io/v1``): the devices drivers publish and the claims that
ask for them.

- ``expressions``: CEL device selectors, compiled once per expression and evaluated once per device;
- ``slices``: ResourceSlices and their pools (only the newest complete generation of a pool counts);
- ``claims``: DeviceClasses, ResourceClaims and the claims a pod names, as values;
- ``extended``: extended resources a DeviceClass serves (KEP-5004) and the claim a pod gets for them;
- ``inventory``: all of it as ClusterState keeps it, and how many devices that satisfy a request are free
  on each node.
"""
