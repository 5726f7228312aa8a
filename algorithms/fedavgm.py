"""FedAvgM (Hsu, Qi & Brown, 2019): FedAvg with a server momentum buffer.

A configuration of FedAvg (``fedavg.FedAvg``), not a subclass: FedAvg's local rule and uplink with the server
momentum optimizer (``optim.ServerMomentum``, ``with_server_momentum``), written as in the GradMA paper,
Appendix Alg. 5 (FedAvgM branch):

    d_{t+1}^(i) = x_t - x_{t,I}^(i)                        (plain local SGD from x_t)
    d_{t+1}     = sum_{i in S_t} p_i d_{t+1}^(i)
    m_{t+1}     = beta1 m_t + d_{t+1},     m_0 = 0          (optim.ServerMomentum)
    x_{t+1}     = x_t - eta_g m_{t+1}

With beta1 = 0 and eta_g = 1 this is FedAvg exactly (tested). ``weighting`` (FedAvg's) chooses p_i:
``"samples"`` (default: p_i = n_i / sum_{j in S_t} n_j, the engine's weights, as FedAvg and Hsu et al.) or
``"uniform"`` (p_i = 1/S, the 1/S of GradMA's Alg. 5). beta1 = 0.9 is Hsu et al.'s value (GradMA's grid
{0.1, 0.5, 0.9}); eta_g is searched in GradMA's grid {0.1, 1.0, 10.0}.
"""
from __future__ import annotations

from .core import register, with_server_momentum
from .fedavg import FedAvg

FedAvgM = register(with_server_momentum(FedAvg, "fedavgm"))
