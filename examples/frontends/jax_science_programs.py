"""Scientific JAX programs: diffrax, numpyro, mujoco-mjx, jax-md (``jax.jit(f).lower(...).as_text("hlo")``).

Runs in an interpreter with those libraries and their own jax (examples/frontends/
requirements-jax-science.txt); see examples/generate_frontends_corpus.py. The libraries' own
code builds the computations: adaptive ODE solves, probabilistic-model log densities, NUTS/HMC
transitions and SVI steps, rigid-body physics steps, molecular-dynamics energies, forces and
integrator steps. State and parameters are jit arguments (``parameter`` instructions).
"""
from __future__ import annotations

import contextlib
import os
import re
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Registry, main, make_program_decorator  # noqa: E402

PROGRAMS: Registry = {}
program = make_program_decorator(PROGRAMS)
SEED = 0

_CALLBACK = re.compile(r'custom_call_target="([^"]*callback[^"]*)"')


def lower(fn, *args, name: str = "", **notes) -> tuple[str, dict]:
    """HLO text of jax.jit(fn) for these arguments, and notes (host callbacks found in it)."""
    import jax
    if name:
        fn.__name__ = fn.__qualname__ = name
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    callbacks = sorted(set(_CALLBACK.findall(text)))
    if callbacks:
        notes["host_callback"] = True
        notes["callback_targets"] = callbacks
    return text, notes


@contextlib.contextmanager
def eqx_on_error(mode: str):
    """Equinox's runtime checks (``eqx.error_if``, used by diffrax for max_steps and failed solves)
    are host callbacks under the default ``EQX_ON_ERROR=raise``; ``"nan"`` turns them into a select
    that poisons the output with NaN, so the program runs without a Python host. The setting is read
    when tracing, so it is switched here per program (and jax's trace caches are cleared)."""
    import equinox._errors as errors
    import jax
    old = errors.EQX_ON_ERROR
    errors.EQX_ON_ERROR = mode
    jax.clear_caches()
    try:
        yield
    finally:
        errors.EQX_ON_ERROR = old
        jax.clear_caches()


def _key(i=0):
    import jax
    return jax.random.PRNGKey(SEED + i)


# ------------------------------------------------------------------------------------ diffrax

def _lotka_volterra(t, y, args):
    import jax.numpy as jnp
    a, b, c, d = args
    x, z = y[..., 0], y[..., 1]
    return jnp.stack([a * x - b * x * z, -c * z + d * x * z], -1)


@program("diffrax_ode_tsit5_pid_infer", "diffrax", "infer")
def diffrax_ode_tsit5_pid_infer():
    import diffrax
    import jax.numpy as jnp

    def solve(y0, args):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(_lotka_volterra), diffrax.Tsit5(), t0=0.0, t1=10.0, dt0=0.1, y0=y0,
            args=args, saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 10.0, 16)),
            stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-7),
            max_steps=256, throw=False)
        return sol.ys, sol.stats["num_steps"], sol.result._value
    y0 = jnp.array([[10.0, 10.0], [5.0, 2.0], [1.0, 8.0], [3.0, 3.0]])
    args = jnp.array([1.5, 1.0, 3.0, 1.0])
    with eqx_on_error("nan"):
        return lower(solve, y0, args, name="diffrax_ode_tsit5_pid", solver="Tsit5",
                     controller="PIDController", throw=False, eqx_on_error="nan")


@program("diffrax_ode_kvaerno5_stiff_throw_infer", "diffrax", "infer")
def diffrax_ode_kvaerno5_stiff_throw_infer():
    """An implicit solver (Newton iterations via optimistix/lineax) with throw=True: equinox's
    runtime error checking (eqx.error_if) of the step count."""
    import diffrax
    import jax.numpy as jnp

    def robertson(t, y, args):
        k1, k2, k3 = args
        y1, y2, y3 = y
        return jnp.stack([-k1 * y1 + k3 * y2 * y3, k1 * y1 - k2 * y2 ** 2 - k3 * y2 * y3, k2 * y2 ** 2])

    def solve(y0, args):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(robertson), diffrax.Kvaerno5(), t0=0.0, t1=100.0, dt0=1e-3, y0=y0,
            args=args, saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-7, pcoeff=0.3, icoeff=0.4),
            max_steps=512, throw=True)
        return sol.ys
    y0 = jnp.array([1.0, 0.0, 0.0])
    args = jnp.array([0.04, 3e7, 1e4])
    with eqx_on_error("raise"):
        return lower(solve, y0, args, name="diffrax_kvaerno5_robertson", solver="Kvaerno5",
                     controller="PIDController", throw=True, eqx_on_error="raise")


@program("diffrax_neural_ode_train_adam", "diffrax+equinox+optax", "train")
def diffrax_neural_ode_train_adam():
    import diffrax
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    mlp = eqx.nn.MLP(2, 2, 32, 2, activation=jax.nn.softplus, key=_key())
    params, static = eqx.partition(mlp, eqx.is_inexact_array)
    tx = optax.adam(3e-3)

    def loss_fn(params, y0, ts, ys):
        model = eqx.combine(params, static)
        term = diffrax.ODETerm(lambda t, y, a: model(y))
        sol = diffrax.diffeqsolve(term, diffrax.Dopri5(), ts[0], ts[-1], 0.05, y0,
                                  saveat=diffrax.SaveAt(ts=ts),
                                  stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-6),
                                  max_steps=128, throw=False,
                                  adjoint=diffrax.RecursiveCheckpointAdjoint(checkpoints=16))
        return jnp.mean((sol.ys - ys) ** 2)

    def step(params, opt_state, y0, ts, ys):
        batched = lambda p: jnp.mean(jax.vmap(loss_fn, (None, 0, None, 0))(p, y0, ts, ys))
        loss, grads = jax.value_and_grad(batched)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    y0 = jax.random.normal(_key(1), (4, 2))
    ts = jnp.linspace(0.0, 2.0, 8)
    ys = jax.random.normal(_key(2), (4, 8, 2))
    with eqx_on_error("nan"):
        return lower(step, params, tx.init(params), y0, ts, ys, name="diffrax_neural_ode_train",
                     solver="Dopri5", adjoint="RecursiveCheckpointAdjoint", optimizer="optax.adam",
                     eqx_on_error="nan")


@program("diffrax_sde_euler_heun_infer", "diffrax", "infer")
def diffrax_sde_euler_heun_infer():
    import diffrax
    import jax
    import jax.numpy as jnp

    def solve(y0, key):
        bm = diffrax.VirtualBrownianTree(0.0, 1.0, tol=1e-3, shape=(3,), key=key)
        terms = diffrax.MultiTerm(diffrax.ODETerm(lambda t, y, a: -0.5 * y),
                                  diffrax.ControlTerm(lambda t, y, a: 0.1 * jnp.diag(jnp.tanh(y) + 1.0), bm))
        sol = diffrax.diffeqsolve(terms, diffrax.Heun(), 0.0, 1.0, 0.02, y0,
                                  saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 1.0, 8)), throw=False)
        return sol.ys
    with eqx_on_error("nan"):
        return lower(jax.vmap(solve), jnp.ones((4, 3)), jax.random.split(_key(3), 4),
                     name="diffrax_sde_heun", solver="Heun", brownian="VirtualBrownianTree",
                     eqx_on_error="nan")


# ------------------------------------------------------------------------------------ numpyro

def _eight_schools(J, sigma, y=None):
    import numpyro
    import numpyro.distributions as dist
    mu = numpyro.sample("mu", dist.Normal(0, 5))
    tau = numpyro.sample("tau", dist.HalfCauchy(5))
    with numpyro.plate("J", J):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


_Y8 = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]
_S8 = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]


@program("numpyro_eight_schools_logdensity_grad_infer", "numpyro", "infer")
def numpyro_eight_schools_logdensity_grad_infer():
    import jax
    import jax.numpy as jnp
    from numpyro.infer.util import initialize_model
    y, s = jnp.array(_Y8), jnp.array(_S8)
    init = initialize_model(_key(), _eight_schools, model_args=(8, s), model_kwargs={"y": y})
    potential_fn = init.potential_fn
    z = init.param_info.z
    return lower(jax.value_and_grad(potential_fn), z, name="numpyro_eight_schools_potential",
                 what="potential energy (negative log density, unconstrained) and its gradient")


def _logreg(x, y=None):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    d = x.shape[-1]
    w = numpyro.sample("w", dist.Normal(jnp.zeros(d), 1.0).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))
    logits = x @ w + b
    with numpyro.plate("N", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=logits / sigma), obs=y)


def _logreg_data(n=64, d=8):
    import jax
    x = jax.random.normal(_key(4), (n, d))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
    return x, y


@program("numpyro_logreg_nuts_step_infer", "numpyro", "infer")
def numpyro_logreg_nuts_step_infer():
    from numpyro.infer import NUTS
    x, y = _logreg_data()
    kernel = NUTS(_logreg, max_tree_depth=6)
    state = kernel.init(_key(5), 10, None, model_args=(x,), model_kwargs={"y": y})

    def nuts_step(state, x, y):
        return kernel.sample(state, (x,), {"y": y})
    return lower(nuts_step, state, x, y, name="numpyro_nuts_sample",
                 what="one NUTS transition (iterative tree building) with step-size adaptation")


@program("numpyro_eight_schools_hmc_step_infer", "numpyro", "infer")
def numpyro_eight_schools_hmc_step_infer():
    import jax.numpy as jnp
    from numpyro.infer import HMC
    y, s = jnp.array(_Y8), jnp.array(_S8)
    kernel = HMC(_eight_schools, num_steps=10, adapt_mass_matrix=True, dense_mass=True)
    state = kernel.init(_key(6), 10, None, model_args=(8, s), model_kwargs={"y": y})

    def hmc_step(state, s, y):
        return kernel.sample(state, (8, s), {"y": y})
    return lower(hmc_step, state, s, y, name="numpyro_hmc_sample",
                 what="one HMC transition, 10 leapfrog steps, dense mass-matrix adaptation")


@program("numpyro_logreg_svi_train_adam", "numpyro", "train")
def numpyro_logreg_svi_train_adam():
    import numpyro
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal
    x, y = _logreg_data()
    guide = AutoNormal(_logreg)
    svi = SVI(_logreg, guide, numpyro.optim.Adam(1e-2), Trace_ELBO(num_particles=4))
    state = svi.init(_key(7), x, y=y)

    def svi_step(state, x, y):
        return svi.update(state, x, y=y)
    return lower(svi_step, state, x, y, name="numpyro_svi_update",
                 what="SVI update: ELBO (4 particles, AutoNormal guide), gradient, Adam")


# ------------------------------------------------------------------------------------ mujoco-mjx

_MJCF = """
<mujoco model="cartpole_arm">
  <option timestep="0.005" integrator="{integrator}"/>
  <worldbody>
    <light pos="0 0 3"/>
    <geom name="floor" type="plane" size="4 4 0.1"/>
    <body name="cart" pos="0 0 0.5">
      <joint name="slider" type="slide" axis="1 0 0" damping="0.1"/>
      <geom type="box" size="0.2 0.1 0.05" mass="1"/>
      <body name="pole" pos="0 0 0">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.6" size="0.04" mass="0.2"/>
        <body name="pole2" pos="0 0 0.6">
          <joint name="hinge2" type="hinge" axis="0 1 0" damping="0.01"/>
          <geom type="capsule" fromto="0 0 0 0 0 0.4" size="0.03" mass="0.1"/>
        </body>
      </body>
    </body>
    <body name="ball" pos="0.5 0 1.5">
      <freejoint/>
      <geom type="sphere" size="0.1" mass="0.3"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="slider" gear="10" ctrlrange="-1 1"/>
    <motor joint="hinge" gear="1" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


def _mjx(integrator="Euler"):
    import mujoco
    from mujoco import mjx
    mj = mujoco.MjModel.from_xml_string(_MJCF.format(integrator=integrator))
    m = mjx.put_model(mj)
    d = mjx.make_data(m)
    return mjx, m, d


@program("mjx_step_infer", "mujoco-mjx", "infer")
def mjx_step_infer():
    import jax.numpy as jnp
    mjx, m, d = _mjx()
    d = d.replace(qpos=d.qpos.at[1].set(0.2), ctrl=jnp.array([0.3, -0.1]))

    def step(m, d):
        return mjx.step(m, d)
    return lower(step, m, d, name="mjx_step", model="cart, double pendulum, free ball; plane contacts",
                 integrator="Euler")


@program("mjx_scan_rollout_infer", "mujoco-mjx", "infer")
def mjx_scan_rollout_infer():
    import jax
    mjx, m, d = _mjx("Euler")

    def rollout(m, d, ctrls):
        def body(d, u):
            d = mjx.step(m, d.replace(ctrl=u))
            return d, (d.qpos, d.qvel)
        return jax.lax.scan(body, d, ctrls)
    ctrls = jax.random.uniform(_key(8), (4, 2), minval=-1.0, maxval=1.0)
    return lower(rollout, m, d, ctrls, name="mjx_rollout", steps=4, integrator="Euler")


@program("mjx_batched_step_infer", "mujoco-mjx", "infer")
def mjx_batched_step_infer():
    import jax
    mjx, m, d = _mjx("implicitfast")
    qpos = jax.vmap(lambda k: d.qpos.at[:3].add(jax.random.uniform(k, (3,), minval=-0.1, maxval=0.1)))(
        jax.random.split(_key(9), 8))
    batch = jax.vmap(lambda q: d.replace(qpos=q))(qpos)

    def step(m, d):
        return jax.vmap(mjx.step, (None, 0))(m, d)
    return lower(step, m, batch, name="mjx_batched_step", batch=8, integrator="implicitfast")


# ------------------------------------------------------------------------------------ jax-md

def _lj_system(n=64, dim=2, box=8.0):
    import jax
    from jax_md import energy, space
    displacement, shift = space.periodic(box)
    R = jax.random.uniform(_key(10), (n, dim), minval=0.0, maxval=box)
    energy_fn = energy.lennard_jones_pair(displacement, sigma=1.0, epsilon=1.0, r_cutoff=2.5)
    return displacement, shift, R, energy_fn


@program("jaxmd_lj_energy_force_infer", "jax-md", "infer")
def jaxmd_lj_energy_force_infer():
    from jax_md import quantity
    displacement, shift, R, energy_fn = _lj_system()

    def energy_and_force(R):
        return energy_fn(R), quantity.force(energy_fn)(R)
    return lower(energy_and_force, R, name="jaxmd_lj_energy_force", particles=64,
                 potential="Lennard-Jones pair (all pairs), periodic box")


@program("jaxmd_soft_sphere_nvt_steps_infer", "jax-md", "infer")
def jaxmd_soft_sphere_nvt_steps_infer():
    import jax
    from jax_md import energy, simulate, space
    box = 6.0
    displacement, shift = space.periodic(box)
    energy_fn = energy.soft_sphere_pair(displacement, sigma=1.0)
    init_fn, apply_fn = simulate.nvt_nose_hoover(energy_fn, shift, dt=5e-3, kT=0.5)
    R = jax.random.uniform(_key(11), (48, 2), minval=0.0, maxval=box)
    state = init_fn(_key(12), R)

    def run(state):
        return jax.lax.fori_loop(0, 10, lambda i, s: apply_fn(s), state)
    return lower(run, state, name="jaxmd_nvt_nose_hoover", steps=10, particles=48)


@program("jaxmd_morse_neighbor_list_nve_infer", "jax-md", "infer")
def jaxmd_morse_neighbor_list_nve_infer():
    import jax
    from jax_md import energy, partition, simulate, space
    box = 10.0
    displacement, shift = space.periodic(box)
    neighbor_fn, energy_fn = energy.morse_neighbor_list(displacement, box, sigma=1.0, epsilon=1.0,
                                                         alpha=5.0, r_cutoff=2.0,
                                                         format=partition.Sparse)
    init_fn, apply_fn = simulate.nve(energy_fn, shift, dt=1e-3)
    R = jax.random.uniform(_key(13), (64, 2), minval=0.0, maxval=box)
    nbrs = neighbor_fn.allocate(R)
    state = init_fn(_key(14), R, kT=0.1, neighbor=nbrs)

    def run(state, nbrs):
        def body(i, carry):
            s, nb = carry
            nb = nb.update(s.position)
            return apply_fn(s, neighbor=nb), nb
        return jax.lax.fori_loop(0, 5, body, (state, nbrs))
    return lower(run, state, nbrs, name="jaxmd_nve_neighbor_list", steps=5, particles=64,
                 neighbor_list="Sparse (cell list update each step)")


@program("jaxmd_fire_minimize_infer", "jax-md", "infer")
def jaxmd_fire_minimize_infer():
    import jax
    from jax_md import minimize
    displacement, shift, R, energy_fn = _lj_system(n=32, box=6.0)
    init_fn, apply_fn = minimize.fire_descent(energy_fn, shift, dt_start=1e-3)
    state = init_fn(R)

    def run(state):
        return jax.lax.fori_loop(0, 10, lambda i, s: apply_fn(s), state)
    return lower(run, state, name="jaxmd_fire_descent", steps=10, particles=32)


@program("jaxmd_lj_fit_sigma_train_adam", "jax-md+optax", "train")
def jaxmd_lj_fit_sigma_train_adam():
    """Fit Lennard-Jones parameters to target energies: gradients of a jax-md energy w.r.t. its
    parameters, an optax Adam update."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax_md import energy, space
    displacement, shift = space.periodic(6.0)
    tx = optax.adam(1e-2)

    def loss_fn(p, Rs, targets):
        fn = energy.lennard_jones_pair(displacement, sigma=p["sigma"], epsilon=p["epsilon"], r_cutoff=2.5)
        return jnp.mean((jax.vmap(fn)(Rs) - targets) ** 2)

    def step(p, opt_state, Rs, targets):
        loss, g = jax.value_and_grad(loss_fn)(p, Rs, targets)
        u, opt_state = tx.update(g, opt_state, p)
        return optax.apply_updates(p, u), opt_state, loss
    p = {"sigma": jnp.array(1.0), "epsilon": jnp.array(1.0)}
    Rs = jax.random.uniform(_key(15), (4, 32, 2), minval=0.0, maxval=6.0)
    return lower(step, p, tx.init(p), Rs, jnp.zeros(4), name="jaxmd_fit_lj")


if __name__ == "__main__":
    sys.exit(main(PROGRAMS, "jax_science", ("jax", "jaxlib", "diffrax", "equinox", "lineax", "optimistix",
                                             "optax", "numpyro", "mujoco", "mujoco-mjx", "jax-md")))
