"""The Airflow plugin: mounts the "Delta maintenance" app in the API server and links it in the nav bar."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .app import URL_PREFIX, create_app


class DeltaMaintenancePlugin(AirflowPlugin):
    """Registered through the ``airflow.plugins`` entry point of this distribution."""

    name = "delta_maintenance"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Delta maintenance"}]
    external_views = [{"name": "Delta maintenance", "href": f"{URL_PREFIX}/", "destination": "nav",
                       "url_route": "delta-maintenance", "category": "browse"}]
