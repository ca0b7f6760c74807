"""Dynamic Resource Allocation (``resource.k8s.io/v1``): the devices drivers publish and the claims that
ask for them.

- ``expressions``: CEL device selectors, compiled once per expression and evaluated once per device;
- ``sharing``: what a device lets a request take under 1.36's partitionable devices, device taints,
  consumable capacity and binding conditions;
- ``slices``: ResourceSlices and their pools (only the newest complete generation of a pool counts);
- ``claims``: DeviceClasses, ResourceClaims and the claims a pod names, as values;
- ``extended``: extended resources a DeviceClass serves (KEP-5004) and the claim a pod gets for them;
- ``inventory``: all of it as ClusterState keeps it, and how many devices that satisfy a request each node
  offers;
- ``demand``: claimed devices as a kind of resource, in counts placement compares;
- ``allocation``: which devices each claim of a placed gang gets (PreBind's choice);
- ``prebind``: writing that choice before any pod of the gang is bound, waiting for drivers to attach the
  devices, and taking it back.
"""

#: The modules from the bottom up: each imports only modules listed before it (``tests/test_layers.py``).
ORDER = (
    "expressions",
    "sharing",
    "claims",
    "extended",
    "slices",
    "inventory",
    "accounting",
    "demand",
    "allocation",
    "prebind",
)
